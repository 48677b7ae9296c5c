#!/usr/bin/env bash
# Builds the image from the repository's Dockerfile on a machine without a Docker engine and
# without access to the base image's registry, with Debian's container tools:
#
#   docker/build-local.sh            # last stdout line: the cache folder of the built image
#
# 1. A base: a Debian bookworm root file system made by mmdebstrap from Debian's packages,
#    imported with `podman import` as localhost/tpu-webhook-base:<base key>. It stands in for the
#    shipped base, python:3.11.x-slim-bookworm, which this machine cannot pull: the same Debian
#    release and the same Python minor version (Debian's python3 3.11.2 in /usr/bin where the
#    official image has CPython 3.11.x built from source in /usr/local), the official image's
#    other runtime packages (ca-certificates, netbase, tzdata), python3-venv for the builder's
#    `python3 -m venv`, and passwd for the Dockerfile's groupadd/useradd. README.md, "What the
#    image contains", lists the differences.
# 2. The image: `buildah bud` of the Dockerfile with --build-arg PYTHON_IMAGE=<that base>, so the
#    shipped Dockerfile keeps its official python base. RUN steps use chroot isolation (this
#    machine's OCI runtimes cannot set the rlimits and cgroups a container would get).
# 3. `podman save` as a docker-archive (image.tar), which `ctr images import` reads too, and the
#    image's SBOM (the file its label io.tpu-webhook.sbom names) copied out as sbom.cdx.json.
#
# Caches, under ${TPU_WEBHOOK_IMAGE_CACHE:-$HOME/.cache/tpu-webhook/image}:
#   base-<base key>.tar   <base key> = hash of the package list, mirrors and options + ISO week
#                         (security updates are picked up weekly)
#   <image key>/          <image key> = hash of the base key, Dockerfile, .dockerignore, this
#                         script and every file of the build context (the lock files among
#                         them); holds image.tar, sbom.cdx.json and image.json (ref, id, size,
#                         build seconds, SBOM)
# A cache hit does nothing but make sure the image is in the local container storage. Builds are
# serialised with flock and published by rename, so an interrupted build leaves no partial cache.
# PIP_CERT (or the system CA bundle) reaches pip as the build secret pip-ca, in no layer.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

REPOSITORY=localhost/tpu-webhook
BASE_REPOSITORY=localhost/tpu-webhook-base
SUITE=bookworm
PACKAGES=python3,python3-venv,ca-certificates,netbase,tzdata,passwd
# /usr merged by mmdebstrap's hook, with Debian's usr-is-merged, as in debian:bookworm-slim
# (the usrmerge package would do it too, and bring perl).
HOOKS=(--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr)
MIRRORS=(
  "deb http://deb.debian.org/debian $SUITE main"
  "deb http://deb.debian.org/debian $SUITE-updates main"
  "deb http://deb.debian.org/debian-security $SUITE-security main"
)
# Documentation and translations are not needed in a server image.
DPKG_OPTS=(
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
)

for tool in mmdebstrap buildah podman flock sha256sum; do
  command -v "$tool" >/dev/null || {
    echo "build-local.sh: $tool not found (apt-get install mmdebstrap buildah podman)" >&2
    exit 1
  }
done

log() { echo "build-local.sh: $*" >&2; }
short() { sha256sum | cut -c1-16; }

cache="${TPU_WEBHOOK_IMAGE_CACHE:-$HOME/.cache/tpu-webhook/image}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# ------------------------------------------------------------------------------ the base
base_key="$(printf '%s\n' "$SUITE" "$PACKAGES" "${MIRRORS[@]}" "${DPKG_OPTS[@]}" "${HOOKS[@]}" \
  "$(date -u +%G-W%V)" | short)"
base_ref="$BASE_REPOSITORY:$base_key"
base_tar="$cache/base-$base_key.tar"
if [[ ! -s "$base_tar" ]]; then
  start=$SECONDS
  log "making the $SUITE root file system ($PACKAGES)"
  mmdebstrap --quiet --variant=essential --include="$PACKAGES" "${DPKG_OPTS[@]}" "${HOOKS[@]}" \
    "$SUITE" "$cache/.partial-base.tar" "${MIRRORS[@]}" >&2  # the .tar suffix picks the format
  mv "$cache/.partial-base.tar" "$base_tar"
  log "root file system made in $((SECONDS - start)) s"
fi
if ! podman image exists "$base_ref"; then
  podman import --quiet "$base_tar" "$base_ref" >/dev/null
fi

# ----------------------------------------------------------------------------- the image
# The build context is what .dockerignore lets in (its `!` lines; checked by tests/image).
context_hash() {
  local allowed
  mapfile -t allowed < <(sed -n 's:^!\(.*[^/]\)/*$:\1:p' .dockerignore)
  find "${allowed[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.py[cod]' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum
}
image_key="$({
  echo "$base_key"
  sha256sum Dockerfile .dockerignore docker/build-local.sh
  context_hash
} | short)"
version="$(awk -F'"' '/^version *=/ { print $2; exit }' pyproject.toml)"
ref="$REPOSITORY:$version-$image_key"
out="$cache/$image_key"

if [[ -s "$out/image.tar" && -s "$out/image.json" && -s "$out/sbom.cdx.json" ]]; then
  if ! podman image exists "$ref"; then
    podman load --quiet --input "$out/image.tar" >/dev/null
  fi
  log "cached: $ref"
  echo "$out"
  exit 0
fi

tmp="$(mktemp -d "$cache/.build-$image_key.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# pip in the build trusts what this machine trusts (PIP_CERT, else the system CA bundle, which
# holds any TLS-inspecting proxy's CA installed here).
secret=()
ca_bundle="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
if [[ -s "$ca_bundle" ]]; then
  secret=(--secret "id=pip-ca,src=$ca_bundle")
fi
start=$SECONDS
log "building $ref from the Dockerfile on $base_ref"
buildah bud --quiet --isolation=chroot --pull=never --layers=false \
  --build-arg "PYTHON_IMAGE=$base_ref" \
  --build-arg "VERSION=$version" \
  --build-arg "REVISION=inputs-$image_key" \
  "${secret[@]}" --tag "$ref" --file Dockerfile . >&2
build_seconds=$((SECONDS - start))
podman save --quiet --format docker-archive --output "$tmp/image.tar" "$ref"
id="$(podman image inspect --format '{{.Id}}' "$ref")"
size="$(podman image inspect --format '{{.Size}}' "$ref")"
sbom_path="$(podman image inspect --format '{{index .Config.Labels "io.tpu-webhook.sbom"}}' "$ref")"
container="$(podman create --quiet "$ref")"
podman cp "$container:$sbom_path" "$tmp/sbom.cdx.json"
podman rm --force "$container" >/dev/null
cat >"$tmp/image.json" <<EOF
{"ref": "$ref", "repository": "$REPOSITORY", "tag": "$version-$image_key", "id": "$id",
 "size_bytes": $size, "build_seconds": $build_seconds, "base": "$base_ref",
 "sbom": "sbom.cdx.json", "sbom_in_image": "$sbom_path"}
EOF
chmod 0755 "$tmp"
rm -rf "$out"
mv -T "$tmp" "$out"
trap - EXIT
log "built $ref in $build_seconds s ($((size / 1048576)) MiB); SBOM: $out/sbom.cdx.json"
echo "$out"
