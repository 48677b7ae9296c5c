"""ruamel's YAML scanner with go-yaml's rules for tabs, and simple keys found in linear time.

kubectl reads manifests with go-yaml (through sigs.k8s.io/yaml), which is libyaml translated to
Go. libyaml treats a tab as white space wherever a token cannot start a simple key (after a
value, after `key:`, before a comment, in flow collections, inside plain scalars, after a block
scalar's indicators) and refuses it only as indentation. ruamel refuses a tab almost anywhere in
block context, so a file that `kubectl create` reads (a trailing TAB after a value) was
"unreadable". The overrides below follow go-yaml's scannerc.go:

- `scan_to_next_token`: blanks are spaces, and tabs too in flow context or where no simple key
  is allowed (`yaml_parser_scan_to_next_token`);
- `scan_plain_spaces`: tabs are blanks inside a plain scalar, but a tab in the leading blanks of a
  continuation line left of the indentation is "a tab character that violates indentation";
- `scan_block_scalar_indicators` / `scan_block_scalar_ignored_line`: tabs may follow `|` or `>`;
- `scan_tag`: a tab may follow a tag.

ruamel's `stale_possible_simple_keys` and `next_possible_simple_key` visit every open flow level
for each token, so 10,000 nested `[` took 37 s. Possible simple keys are kept in the order they
were saved, which is also the order of their positions and token numbers: the stale ones are a
prefix of that order, and the first one has the smallest token number.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.scanner import Scanner, ScannerError
from ruamel.yaml.tokens import TagToken

_BREAKS = "\r\n\x85\u2028\u2029"
_BLOCK_SCALAR_END = "\0 \t" + _BREAKS
_SIMPLE_KEY_SPAN = 1024  # characters a simple key may span (YAML 1.1 and 1.2, as ruamel)


class KubectlScanner(Scanner):
    """A Scanner that reads blanks and tabs as go-yaml does."""

    def scan_to_next_token(self) -> None:
        srp, srf = self.reader.peek, self.reader.forward
        while True:
            while srp() == " " or (srp() == "\t" and self._tab_is_blank()):
                srf()
            super().scan_to_next_token()  # spaces, comments and line breaks
            if srp() != "\t" or not self._tab_is_blank():
                return

    def _tab_is_blank(self) -> bool:
        return bool(self.flow_level) or not self.allow_simple_key

    def scan_plain_spaces(self, indent: int, start_mark: Any) -> list[str] | None:
        srp, srf = self.reader.peek, self.reader.forward
        length = 0
        while srp(length) in " \t":
            length += 1
        whitespaces = self.reader.prefix(length)
        srf(length)
        if srp() not in _BREAKS:
            return [whitespaces] if whitespaces else []
        line_break = self.scan_line_break()
        self.allow_simple_key = True
        if self._at_document_marker():
            return None
        breaks: list[str] = []
        while srp() in " \t" + _BREAKS:
            if srp() == "\t" and self.reader.column < indent:
                raise ScannerError(
                    "while scanning a plain scalar",
                    start_mark,
                    "found a tab character that violates indentation",
                    self.reader.get_mark(),
                )
            if srp() in " \t":
                srf()
                continue
            breaks.append(self.scan_line_break())
            if self._at_document_marker():
                return None
        chunks = [line_break] if line_break != "\n" else ([] if breaks else [" "])
        return chunks + breaks

    def _at_document_marker(self) -> bool:
        return self.reader.prefix(3) in ("---", "...") and self.reader.peek(3) in "\0 \t" + _BREAKS

    def scan_block_scalar_indicators(self, start_mark: Any) -> tuple[bool | None, int | None]:
        srp, srf = self.reader.peek, self.reader.forward
        chomping: bool | None = None
        increment: int | None = None
        while True:
            ch = srp()
            if ch in "+-" and chomping is None:
                chomping = ch == "+"
            elif ch in "0123456789" and increment is None:
                if ch == "0":
                    raise ScannerError(
                        "while scanning a block scalar",
                        start_mark,
                        "expected indentation indicator in the range 1-9, but found 0",
                        self.reader.get_mark(),
                    )
                increment = int(ch)
            else:
                break
            srf()
        if srp() not in _BLOCK_SCALAR_END:
            raise ScannerError(
                "while scanning a block scalar",
                start_mark,
                f"expected chomping or indentation indicators, but found {srp()!r}",
                self.reader.get_mark(),
            )
        return chomping, increment

    def scan_block_scalar_ignored_line(self, start_mark: Any) -> None:
        srp, srf = self.reader.peek, self.reader.forward
        while srp() in " \t":
            srf()
        if srp() == "#":
            while srp() not in "\0" + _BREAKS:
                srf()
        if srp() not in "\0" + _BREAKS:
            raise ScannerError(
                "while scanning a block scalar",
                start_mark,
                f"expected a comment or a line break, but found {srp()!r}",
                self.reader.get_mark(),
            )
        self.scan_line_break()

    def scan_tag(self) -> Any:
        """A tag (`!x`, `!!str`, `!h!suffix`, `!<uri>`, `!`), which a tab may follow."""
        srp, srf = self.reader.peek, self.reader.forward
        start_mark = self.reader.get_mark()
        short_handle = "!"
        if srp(1) == "!":
            short_handle = "!!"
            srf()
        handle: str | None = short_handle
        if srp(1) == "<":
            handle = None
            srf(2)
            suffix = self.scan_tag_uri("tag", start_mark)
            if srp() != ">":
                raise ScannerError(
                    "while parsing a tag", start_mark, f"expected '>' but found {srp()!r}",
                    self.reader.get_mark(),
                )  # fmt: skip
            srf()
        elif srp(1) in "\0 \t" + _BREAKS:
            handle, suffix = None, short_handle
            srf()
        else:
            length = 1
            while srp(length) not in "\0 !" + _BREAKS:
                length += 1
            if srp(length) == "!":
                handle = self.scan_tag_handle("tag", start_mark)
            else:
                srf()
            suffix = self.scan_tag_uri("tag", start_mark)
        if srp() not in "\0 \t" + _BREAKS:
            raise ScannerError(
                "while scanning a tag", start_mark, f"expected ' ', but found {srp()!r}",
                self.reader.get_mark(),
            )  # fmt: skip
        return TagToken((handle, suffix), start_mark, self.reader.get_mark())

    def next_possible_simple_key(self) -> int | None:
        for key in self.possible_simple_keys.values():
            return int(key.token_number)
        return None

    def stale_possible_simple_keys(self) -> None:
        keys = self.possible_simple_keys
        for level, key in list(_prefix_while_stale(keys, self.reader.line, self.reader.index)):
            if key.required:
                raise ScannerError(
                    "while scanning a simple key",
                    key.mark,
                    "could not find expected ':'",
                    self.reader.get_mark(),
                )
            del keys[level]


def _prefix_while_stale(keys: dict[int, Any], line: int, index: int) -> list[tuple[int, Any]]:
    stale = []
    for level, key in keys.items():
        if key.line == line and index - key.index <= _SIMPLE_KEY_SPAN:
            break
        stale.append((level, key))
    return stale
