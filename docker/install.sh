#!/bin/sh
# Installs tpu-webhook and its pinned dependencies into a new virtual environment.
#
#   docker/install.sh VENV_DIR SRC_DIR
#
# VENV_DIR  the virtual environment to create (e.g. /opt/venv in the image)
# SRC_DIR   the repository root: pyproject.toml, README.md and webhook/
#
# Used by the Dockerfile's builder stage and, unchanged, outside Docker (tests/image runs it
# into a temporary directory). The wheel is built from a copy of only what it needs, so an
# in-tree build never writes build/ or *.egg-info into SRC_DIR. Dependencies are the exact
# versions pinned in pyproject.toml; pip's own settings apply (PIP_INDEX_URL, PIP_CONSTRAINT to
# pin transitive dependencies too). PYTHON selects the interpreter (default python3, >= 3.11).
# In an image build, a CA bundle given as the build secret `pip-ca` (/run/secrets/pip-ca) is
# pip's PIP_CERT unless PIP_CERT is already set.
set -eu

if [ -z "${PIP_CERT:-}" ] && [ -s /run/secrets/pip-ca ]; then
  PIP_CERT=/run/secrets/pip-ca
  export PIP_CERT
fi

if [ "$#" -ne 2 ]; then
  echo "usage: $0 VENV_DIR SRC_DIR" >&2
  exit 2
fi
venv=$1
src=$2
python=${PYTHON:-python3}

for need in pyproject.toml README.md webhook; do
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

"$python" -m venv "$venv"
pip() {
  "$venv/bin/python" -m pip --disable-pip-version-check --no-input "$@"
}
pip wheel --no-cache-dir --no-deps --wheel-dir "$work/dist" "$work/src"
pip install --no-cache-dir "$work"/dist/tpu_webhook-*.whl

# The runtime needs neither pip nor setuptools: not shipping them leaves less to patch.
pip uninstall --yes pip setuptools >/dev/null

# Fail here, not at the first admission review, when the install is incomplete.
"$venv/bin/python" -c 'import webhook.serving.app, webhook.cli, webhook.serving.server'
test -x "$venv/bin/tpu-webhook"
version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("tpu-webhook"))')
echo "$0: installed tpu-webhook $version into $venv" >&2
