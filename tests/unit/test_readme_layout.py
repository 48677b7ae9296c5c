"""README.md's `## Layout` matches the tree, read when the tests run: every path it names
exists, and every package and module of webhook/ is named in its package's entry.

The Layout is one code block. A line whose first word is a directory (`serving/`) opens that
directory's entry, under the entry of the nearest line indented less; every other name on the
line (`app.py`, `tpus.yaml`, `unit/`) is in that directory. A line without one continues the
entry of the nearest line indented less.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
PACKAGE = "webhook"
#: a directory (`policy/`, `charts/tpu-webhook/`) or a file of a kind the Layout names
NAME = re.compile(r"(?<![\w./-])([\w.-]+(?:/[\w.-]+)*(?:/|\.(?:py|yaml|sh)))(?![\w/])")

Named = dict[Path, set[Path]]


def layout_lines(readme: str) -> list[str]:
    """The lines of the code block under `## Layout`."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1].splitlines()[1:]  # [0]: the rest of the opening fence


def named_in(lines: list[str]) -> Named:
    """Each directory (relative to the root; `.` for the root) -> the paths its entry names."""
    named: Named = {}
    opened: list[tuple[int, Path]] = []  # the entries the next line may be under
    for line in lines:
        words = line.split()
        if not words:
            continue
        indent = len(line) - len(line.lstrip())
        while opened and opened[-1][0] >= indent:
            opened.pop()
        directory = opened[-1][1] if opened else Path()
        rest = line
        if NAME.fullmatch(words[0]) and words[0].endswith("/"):
            named.setdefault(directory, set()).add(directory / words[0])
            directory = directory / words[0]
            opened.append((indent, directory))
            rest = line.lstrip()[len(words[0]) :]
        named.setdefault(directory, set()).update(directory / name for name in NAME.findall(rest))
    return named


def stale(named: Named, root: Path) -> list[str]:
    """Paths the Layout names that the tree does not have."""
    return sorted(
        str(path) for paths in named.values() for path in paths if not (root / path).exists()
    )


def unnamed(named: Named, root: Path, package: str) -> list[str]:
    """Packages and modules of `package` that the entry of their parent package does not name."""
    missing = [] if Path(package) in named.get(Path(), set()) else [package]
    for init in sorted((root / package).rglob("__init__.py")):
        directory = init.parent.relative_to(root)
        expected = {
            path.relative_to(root)
            for path in init.parent.iterdir()
            if (path.suffix == ".py" and path.name != "__init__.py")
            or (path / "__init__.py").is_file()
        }
        missing += sorted(str(path) for path in expected - named.get(directory, set()))
    return missing


def test_every_path_the_layout_names_exists() -> None:
    named = named_in(layout_lines(README.read_text()))
    missing = stale(named, REPO_ROOT)
    assert missing == [], f"README.md's Layout names what the tree lacks: {missing}"


def test_every_package_and_module_of_webhook_is_named_in_its_package_entry() -> None:
    named = named_in(layout_lines(README.read_text()))
    missing = unnamed(named, REPO_ROOT, PACKAGE)
    assert missing == [], f"README.md's Layout does not name: {missing}"


def test_the_layout_names_the_top_level_directories_and_webhook_s_packages() -> None:
    named = named_in(layout_lines(README.read_text()))
    top = {str(path) for path in named[Path()]}
    assert {"webhook", "charts/tpu-webhook", "dev", "docker", "examples", "tests"} <= top
    assert Path("webhook/serving") in named[Path("webhook")]
    assert Path("webhook/serving/app.py") in named[Path("webhook/serving")]


def test_a_moved_module_and_a_new_package_are_both_found(tmp_path: Path) -> None:
    """What a move of serving/rotation.py into a new certificates/ package leaves behind."""
    for module in ("__init__.py", "serving/__init__.py", "serving/app.py"):
        (tmp_path / "webhook" / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "webhook" / module).touch()
    (tmp_path / "webhook" / "certificates").mkdir()
    (tmp_path / "webhook" / "certificates" / "__init__.py").touch()
    (tmp_path / "webhook" / "certificates" / "rotation.py").touch()
    readme = (
        "# x\n\n## Layout\n\n```\nwebhook/\n  serving/   the HTTPS boundary: app.py,\n"
        "             rotation.py (certificates)\n```\n\n## Next\n"
    )
    named = named_in(layout_lines(readme))
    assert named[Path("webhook/serving")] == {
        Path("webhook/serving/app.py"),
        Path("webhook/serving/rotation.py"),
    }
    assert stale(named, tmp_path) == ["webhook/serving/rotation.py"]
    assert unnamed(named, tmp_path, "webhook") == [
        "webhook/certificates",
        "webhook/certificates/rotation.py",
    ]
