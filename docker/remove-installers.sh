#!/bin/sh
# Removes from the runtime stage's base what installs Python packages: the server runs from
# /opt/venv and never installs anything, so pip, setuptools and wheel, and the wheels that
# ensurepip and `python3 -m venv` would install from, are only more code to patch and scan.
#
#   docker/remove-installers.sh        # in the Dockerfile's runtime stage, as root
#
# Works on both bases the Dockerfile is built on:
# - the official python image: pip, setuptools and wheel in /usr/local/lib/python3.X/site-packages
#   with their commands in /usr/local/bin, and ensurepip's bundled pip and setuptools wheels;
# - the Debian root file system of docker/build-local.sh: Debian's python3-venv,
#   python3.X-venv (ensurepip), python3-pip-whl and python3-setuptools-whl, purged with dpkg so
#   that its database, which image scanners read, says what is there.
# Then it checks that none of them can be imported.
set -eu
python=${PYTHON:-python3}

if command -v dpkg-query >/dev/null 2>&1; then
  packages=$(dpkg-query --show --showformat '${db:Status-Status} ${Package}\n' \
    'python3*-venv' 'python3-pip*' 'python3-setuptools*' 'python3-wheel*' 2>/dev/null |
    awk '$1 == "installed" { print $2 }')
  if [ -n "$packages" ]; then
    # shellcheck disable=SC2086  # one package name per word
    dpkg --purge $packages
  fi
fi

# Where this interpreter keeps packages, its commands and its standard library.
paths=$("$python" -I -c '
import site, sysconfig
dirs = {*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
print(*sorted(dirs), sep="\n")
print("scripts", sysconfig.get_path("scripts"))
print("stdlib", sysconfig.get_path("stdlib"))
')
echo "$paths" | while read -r kind dir; do
  case $kind in
    scripts) rm -f "$dir"/pip "$dir"/pip3 "$dir"/pip3.* "$dir"/wheel "$dir"/easy_install* ;;
    stdlib) rm -rf "$dir/ensurepip" ;;
    *)
      site=$kind
      rm -rf "$site"/pip "$site"/pip-*.dist-info "$site"/setuptools "$site"/setuptools-*.dist-info \
        "$site"/pkg_resources "$site"/_distutils_hack "$site"/distutils-precedence.pth \
        "$site"/wheel "$site"/wheel-*.dist-info
      ;;
  esac
done
rm -rf /usr/share/python-wheels

"$python" -I -c '
import importlib.util, sys
left = [m for m in ("pip", "setuptools", "wheel", "pkg_resources", "ensurepip")
        if importlib.util.find_spec(m) is not None]
sys.exit(f"remove-installers.sh: still importable: {left}" if left else 0)
'
