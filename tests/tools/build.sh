#!/usr/bin/env bash
# Builds the end-to-end test tools (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl, helm) from the Go modules pinned in this
# folder's go.mod/go.sum, into
#   ${TPU_WEBHOOK_TOOLS_CACHE:-$HOME/.cache/tpu-webhook/tools}/<key>/
# where <key> = <k8s version>-<short hash of go.mod, go.sum and this script>.
# Does nothing when every binary is already there. The LAST line on stdout is the
# bin dir; everything else goes to stderr. A build goes to a temp dir that is
# renamed into place, so an interrupted build never leaves a half-filled cache.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl helm)

modver() { # version of a required module, read from go.mod
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' go.mod
}
K8S_VERSION="$(modver k8s.io/kubernetes)"
ETCD_VERSION="$(modver go.etcd.io/etcd/server/v3)"
HELM_VERSION="$(modver helm.sh/helm/v3)"
[[ -n "$K8S_VERSION" && -n "$ETCD_VERSION" && -n "$HELM_VERSION" ]] || {
  echo "build.sh: cannot read tool versions from go.mod" >&2
  exit 1
}

hash="$(cat go.mod go.sum build.sh | sha256sum | cut -c1-12)"
cache_root="${TPU_WEBHOOK_TOOLS_CACHE:-$HOME/.cache/tpu-webhook/tools}"
bin_dir="$cache_root/$K8S_VERSION-$hash"

complete() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$bin_dir/$b" ]] || return 1; done
}

if complete; then
  echo "$bin_dir"
  exit 0
fi

mkdir -p "$cache_root"
# Serialise concurrent builds of the same key (e.g. parallel test sessions).
exec 9>"$cache_root/.lock-$K8S_VERSION-$hash"
flock 9
if complete; then
  echo "$bin_dir"
  exit 0
fi

tmp="$(mktemp -d "$cache_root/.build-$K8S_VERSION-$hash.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

# Stamps. The module proxy gives no commit hashes, so gitCommit names the module
# version; buildDate is the tag's time as the proxy reports it (reproducible).
k8s_minor="${K8S_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"
tag_time="$(go list -m -f '{{with .Time}}{{.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)"
tag_time="${tag_time:-1970-01-01T00:00:00Z}"
kv() { # -X flags for one Go version package
  echo "-X $1.gitVersion=$K8S_VERSION -X $1.gitMajor=1 -X $1.gitMinor=$k8s_minor" \
    "-X $1.gitCommit=gomod-$K8S_VERSION -X $1.gitTreeState=clean -X $1.buildDate=$tag_time"
}
K8S_LDFLAGS="$(kv k8s.io/component-base/version)"
KUBECTL_LDFLAGS="$K8S_LDFLAGS $(kv k8s.io/client-go/pkg/version)"
ETCD_LDFLAGS="-X go.etcd.io/etcd/api/v3/version.GitSHA=gomod-$ETCD_VERSION"
# Helm's Makefile also stamps the Kubernetes version its client-go targets (1.35).
helm_k8s_minor="$(modver k8s.io/client-go)"
helm_k8s_minor="${helm_k8s_minor#v0.}"
helm_k8s_minor="${helm_k8s_minor%%.*}"
HELM_LDFLAGS="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
-X helm.sh/helm/v3/internal/version.gitCommit=gomod-$HELM_VERSION \
-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$helm_k8s_minor \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$helm_k8s_minor"

build() { # build <name> <package> <ldflags>
  local start=$SECONDS
  echo "build.sh: building $1 ($2)" >&2
  go build -p 2 -trimpath -ldflags "-s -w $3" -o "$tmp/$1" "$2" >&2
  echo "build.sh: built $1 in $((SECONDS - start)) s" >&2
}

total_start=$SECONDS
echo "build.sh: downloading modules" >&2
go mod download >&2
build etcd go.etcd.io/etcd/server/v3 "$ETCD_LDFLAGS"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$K8S_LDFLAGS"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$K8S_LDFLAGS"
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$K8S_LDFLAGS"
build kubelet k8s.io/kubernetes/cmd/kubelet "$K8S_LDFLAGS"
build kubectl k8s.io/kubernetes/cmd/kubectl "$KUBECTL_LDFLAGS"
build helm helm.sh/helm/v3/cmd/helm "$HELM_LDFLAGS"

# Atomic publish: a leftover incomplete dir (e.g. a binary deleted by hand) is
# moved aside first; rename(2) within one file system is atomic.
if [[ -e "$bin_dir" ]]; then
  mv -T "$bin_dir" "$tmp.stale"
fi
chmod 0755 "$tmp"
mv -T "$tmp" "$bin_dir"
trap - EXIT
rm -rf "$tmp.stale"
echo "build.sh: tools ready in $((SECONDS - total_start)) s: $bin_dir" >&2
echo "$bin_dir"
