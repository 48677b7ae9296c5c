#!/usr/bin/env bash
# Builds the JobSet, LeaderWorkerSet, KubeRay and Kubeflow Trainer operators (their
# controller managers) from the released Go modules pinned in ./<name>/go.mod, one small
# Go module per operator, into
#   ${TPU_WEBHOOK_TOOLS_CACHE:-$HOME/.cache/tpu-webhook/tools}/operators/<name>-<version>-<hash>/
# where <hash> = short hash of that operator's go.mod, go.sum, tools.go and this script.
# Each folder holds:
#   manager      the operator's main package, built as upstream's Makefile does
#   crds/        the CRDs of the same module version (from the module zip)
#   webhook/     its webhook manifests.yaml and kustomize patches, when it has them
#
#   build.sh [name ...]      # default: jobset lws kuberay trainer
#
# Stdout is exactly one line per requested operator, its folder, in the order asked
# (so with one name the LAST line is its folder); everything else goes to stderr.
# Does nothing for an operator whose folder is complete. A build goes to a temp dir
# renamed into place under flock, so an interrupted or concurrent build never leaves
# a half-filled cache. Builds run under `nice`: the machine's cores are shared.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ALL=(jobset lws kuberay trainer)
cache_root="${TPU_WEBHOOK_TOOLS_CACHE:-$HOME/.cache/tpu-webhook/tools}/operators"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

# Per operator: where its CRDs and webhook manifests live inside the module, and the
# -X stamps of its Makefile (the proxy gives no commit hash: gitCommit names the
# version; a build date is the tag's time as the proxy reports it, reproducible).
crd_dir() {
  case "$1" in
    jobset) echo config/components/crd/bases ;;
    lws | kuberay) echo config/crd/bases ;;
    trainer) echo manifests/base/crds ;;
  esac
}
webhook_dir() {
  case "$1" in
    jobset) echo config/components/webhook ;;
    lws | kuberay) echo config/webhook ;;
    trainer) echo manifests/base/webhook ;;
  esac
}
stamps() { # stamps <name> <version> <tag time>
  case "$1" in
    jobset)
      echo "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$2" \
        "-X sigs.k8s.io/jobset/pkg/version.GitCommit=gomod-$2"
      ;;
    lws)
      echo "-X sigs.k8s.io/lws/pkg/version.GitVersion=$2" \
        "-X sigs.k8s.io/lws/pkg/version.GitCommit=gomod-$2" \
        "-X sigs.k8s.io/lws/pkg/version.BuildDate=$3"
      ;;
    kuberay) echo "" ;; # its version is a constant (utils.KUBERAY_VERSION)
    trainer) echo "" ;; # its Dockerfile runs a plain `go build -a`: nothing to stamp
  esac
}

build_one() { # build_one <name>; prints its folder on stdout
  local name="$1" dir="$here/$1"
  [[ -f "$dir/go.mod" && -n "$(crd_dir "$name")" ]] || {
    echo "operators/build.sh: unknown operator '$name' (known: ${ALL[*]})" >&2
    return 1
  }
  cd "$dir"
  local module version main hash out
  # The operator is the one single-line `require` of go.mod; its main package is the
  # blank import of tools.go.
  module="$(awk '$1 == "require" && $2 != "(" { print $2; exit }' go.mod)"
  version="$(awk '$1 == "require" && $2 != "(" { print $3; exit }' go.mod)"
  main="$(awk -F'"' '/^import _ "/ { print $2; exit }' tools.go)"
  [[ -n "$module" && -n "$version" && -n "$main" ]] || {
    echo "operators/build.sh: cannot read module/version/main package of $name" >&2
    return 1
  }
  hash="$(cat go.mod go.sum tools.go "$here/build.sh" | sha256sum | cut -c1-12)"
  out="$cache_root/$name-$version-$hash"

  complete() { [[ -x "$out/manager" && -d "$out/crds" && -f "$out/build-info" ]]; }
  if complete; then
    echo "$out"
    return 0
  fi
  mkdir -p "$cache_root"
  # Serialise concurrent builds of the same key (e.g. parallel test sessions).
  exec 9>"$cache_root/.lock-$name-$version-$hash"
  flock 9
  if complete; then
    exec 9>&-
    echo "$out"
    return 0
  fi

  local tmp start=$SECONDS src tag_time
  tmp="$(mktemp -d "$cache_root/.build-$name-$version-$hash.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "operators/build.sh: $name: downloading modules" >&2
  go mod download >&2
  src="$(go list -m -f '{{.Dir}}' "$module")"
  tag_time="$(go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' "$module")"
  tag_time="${tag_time:-1970-01-01T00:00:00Z}"

  echo "operators/build.sh: $name: building $main@$version" >&2
  nice -n 10 go build -p 2 -trimpath -ldflags "-s -w $(stamps "$name" "$version" "$tag_time")" \
    -o "$tmp/manager" "$main" >&2

  mkdir "$tmp/crds" "$tmp/webhook"
  # every CRD file of the folder (Trainer's also holds its kustomization.yaml)
  find "$src/$(crd_dir "$name")" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml \
    -exec cp {} "$tmp/crds/" \;
  if [[ -f "$src/$(webhook_dir "$name")/manifests.yaml" ]]; then
    cp -r "$src/$(webhook_dir "$name")"/. "$tmp/webhook/"
  fi
  chmod -R u+w,go+rX "$tmp" # the module cache is read-only
  printf 'module %s\nversion %s\nmain %s\ntag_time %s\n' \
    "$module" "$version" "$main" "$tag_time" >"$tmp/build-info"

  # Atomic publish: a leftover incomplete dir is moved aside first; rename(2) within
  # one file system is atomic.
  if [[ -e "$out" ]]; then
    mv -T "$out" "$tmp.stale"
  fi
  chmod 0755 "$tmp"
  mv -T "$tmp" "$out"
  trap - EXIT
  rm -rf "$tmp.stale"
  exec 9>&-
  echo "operators/build.sh: $name $version built in $((SECONDS - start)) s: $out" >&2
  echo "$out"
}

names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=("${ALL[@]}")
for n in "${names[@]}"; do
  (build_one "$n")
done
