#!/usr/bin/env bash
# The Debian packages the tests need (`make setup`, which `make test`, `make test-e2e` and
# `make image` run first). Installs the missing ones with apt-get as root or with passwordless
# sudo; otherwise stops with one line naming them and the apt-get command that installs them.
# `--check` only reports (the `debian_packages` fixture, tests/support/tiers.py).
set -euo pipefail

# The packages, by a command (or file) that shows each is there:
# - openssl: the CLI probes the server's TLS versions and ciphers (tests/robustness);
# - mmdebstrap, buildah, podman: the image is built from the Dockerfile on a Debian root file
#   system and run as the chart runs it (docker/build-local.sh, tests/image);
# - containerd (ctr), runc, containernetworking-plugins, iptables: the one-node cluster's
#   runtime and Pod network (tests/support/node.py, tests/e2e/test_node.py).
declare -A NEED=(
  [openssl]=openssl
  [mmdebstrap]=mmdebstrap
  [buildah]=buildah
  [podman]=podman
  [runc]=runc
  [containerd]=containerd
  [ctr]=containerd
  [/usr/lib/cni/bridge]=containernetworking-plugins
  [iptables]=iptables
)

case "${1:-}" in
  "" | --check) ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

have() {  # an executable file on PATH, or at that path
  local path
  path=$(command -v "$1") || path=$1
  [[ -f $path && -x $path ]]
}

missing=()
for cmd in "${!NEED[@]}"; do
  have "$cmd" || missing+=("${NEED[$cmd]}")
done
((${#missing[@]})) || exit 0
packages=$(printf '%s\n' "${missing[@]}" | sort -u | paste -sd ' ')
install="apt-get install -y --no-install-recommends $packages"

as=none
if [[ "${1:-}" != --check ]] && command -v apt-get >/dev/null; then
  if ((EUID == 0)); then
    as=root
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    as=sudo
  fi
fi
if [[ $as == none ]]; then
  echo "missing Debian packages the tests need: $packages; install them with: sudo apt-get update && sudo $install" >&2
  exit 1
fi
sudo=()
[[ $as == sudo ]] && sudo=(sudo -n)
echo "Installing the Debian packages the tests need: $packages"
"${sudo[@]}" apt-get update -qq
# shellcheck disable=SC2086  # one word per package
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages
exec bash "${BASH_SOURCE[0]}" --check  # installed now, or say what is still missing
