#!/bin/sh
# Installs tpu-webhook and exactly its locked dependencies into a new virtual environment, and
# writes that environment's SBOM.
#
#   docker/install.sh VENV_DIR SRC_DIR SBOM_FILE
#
# VENV_DIR   the virtual environment to create (e.g. /opt/venv in the image)
# SRC_DIR    the repository root: pyproject.toml, README.md, webhook/ and the docker/*.lock files
# SBOM_FILE  where to write the CycloneDX (JSON) SBOM of VENV_DIR's distributions
#
# Used by the Dockerfile's builder stage and, unchanged, outside Docker (tests/image runs it
# into a temporary directory). Every file downloaded is checked against its sha256 in a lock
# file (`make lock` writes them; see dev/lock.py), so two builds of one commit install the same
# bytes:
# 1. a throw-away build environment (the base's ensurepip pip) gets docker/build-requirements.lock:
#    setuptools, the build backend, and cyclonedx-bom, the SBOM generator;
# 2. the wheel of tpu-webhook is built from a copy of only what it needs, by that setuptools
#    (no build isolation: nothing unlocked is fetched), so an in-tree build never writes build/
#    or *.egg-info into SRC_DIR;
# 3. VENV_DIR is made without pip; the build environment's pip installs docker/requirements.lock
#    into it (pip --python: hashes required, wheels only, no resolving), then the wheel without
#    dependencies, and `pip check` confirms every requirement is met;
# 4. cyclonedx-py writes SBOM_FILE from VENV_DIR (reproducible: no serial number or timestamp).
# VENV_DIR ends with no pip, setuptools or wheel. pip's own settings apply (PIP_INDEX_URL: the
# locks hold hashes, not addresses). PYTHON selects the interpreter (default python3, 3.11: the
# locks are resolved for CPython 3.11 on Linux x86_64 and aarch64). In an image build, a CA
# bundle given as the build secret `pip-ca` (/run/secrets/pip-ca) is pip's PIP_CERT unless
# PIP_CERT is already set.
set -eu

if [ -z "${PIP_CERT:-}" ] && [ -s /run/secrets/pip-ca ]; then
  PIP_CERT=/run/secrets/pip-ca
  export PIP_CERT
fi

if [ "$#" -ne 3 ]; then
  echo "usage: $0 VENV_DIR SRC_DIR SBOM_FILE" >&2
  exit 2
fi
venv=$1
src=$2
sbom=$3
python=${PYTHON:-python3}

for need in pyproject.toml README.md webhook docker/requirements.lock docker/build-requirements.lock; do
  if [ ! -e "$src/$need" ]; then
    echo "$0: $src/$need not found (SRC_DIR must be the repository root)" >&2
    exit 2
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

mkdir "$work/src" "$work/dist"
cp "$src/pyproject.toml" "$src/README.md" "$work/src/"
cp -R "$src/webhook" "$work/src/webhook"
find "$work/src" -name __pycache__ -type d -prune -exec rm -rf {} +

# 1. The build environment (never part of VENV_DIR).
"$python" -m venv "$work/build"
pip() {
  "$work/build/bin/python" -m pip --disable-pip-version-check --no-input "$@"
}
locked() {  # locked LOCK: every file checked against its hash, wheels only, nothing resolved
  set -- install --no-cache-dir --progress-bar off --require-hashes --no-deps --only-binary :all: \
    --requirement "$@"
  if [ -n "${target:-}" ]; then set -- --python "$target" "$@"; fi
  pip "$@"
}
locked "$src/docker/build-requirements.lock"

# 2. The wheel of tpu-webhook.
pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir "$work/dist" "$work/src"

# 3. The venv: the locked dependencies, then the wheel.
"$python" -m venv --without-pip "$venv"
target="$venv/bin/python"  # pip --python: the build environment's pip installs into the venv
locked "$src/docker/requirements.lock" --report "$work/installed.json"
pip --python "$target" install --no-cache-dir --no-index --no-deps "$work"/dist/tpu_webhook-*.whl
pip --python "$target" check

# Fail here, not at the first admission review, when the install is incomplete.
# (-I: the venv alone, not the working directory, which may be SRC_DIR.)
"$venv/bin/python" -I -c 'import webhook.serving.app, webhook.cli, webhook.serving.server'
test -x "$venv/bin/tpu-webhook"
for absent in pip setuptools wheel; do
  if "$venv/bin/python" -I -c "import $absent" 2>/dev/null; then
    echo "$0: $venv has $absent, which the runtime must not ship" >&2
    exit 1
  fi
done

# 4. The SBOM: tpu-webhook is its root component, every other distribution a component, to which
# the sha256 of the file pip installed (from pip's report) is added.
mkdir -p "$(dirname "$sbom")"
"$work/build/bin/cyclonedx-py" environment --output-reproducible --output-format JSON \
  --pyproject "$work/src/pyproject.toml" --output-file "$sbom" "$venv/bin/python"
"$work/build/bin/python" -I - "$sbom" "$work/installed.json" <<'EOF'
import json, sys
from packaging.utils import canonicalize_name
sbom, report = sys.argv[1:]
with open(report) as f:
    installed = {}
    for item in json.load(f)["install"]:
        archive = item["download_info"]["archive_info"]
        digest = archive.get("hashes", {}).get("sha256") or archive["hash"].split("=", 1)[1]
        name = canonicalize_name(item["metadata"]["name"])
        installed[name] = (item["metadata"]["version"], digest)
with open(sbom) as f:
    bom = json.load(f)
for component in bom["components"]:
    version, digest = installed.pop(canonicalize_name(component["name"]), (None, None))
    if version != component["version"]:
        sys.exit(f"SBOM: {component['name']} {component['version']} was not installed")
    component["hashes"] = [{"alg": "SHA-256", "content": digest}]
if installed:
    sys.exit(f"SBOM: installed but not listed: {sorted(installed)}")
with open(sbom, "w") as f:
    json.dump(bom, f, indent=2)
    f.write("\n")
EOF

version=$("$venv/bin/python" -I -c 'import importlib.metadata as m; print(m.version("tpu-webhook"))')
echo "$0: installed tpu-webhook $version into $venv, SBOM $sbom" >&2
