#!/usr/bin/env bash
# Build kube-apiserver and etcd for the test control plane, and helm for the chart's tests
# (deploy/helm/xidpipe), from the Go module proxy.
#
#   deploy/testcluster/build.sh                 build if needed, print the bin directory
#   deploy/testcluster/build.sh --print-bin-dir print where the binaries are (or would be); no build
#   deploy/testcluster/build.sh --print-helm    print where helm is (or would be); no build
#   deploy/testcluster/build.sh --force         rebuild even if the binaries exist
#
# helm: ${XIDPIPE_CACHE:-$HOME/.cache/xidpipe}/helm/v<HELM_VERSION>-<go version>/bin/helm, built by
# `go install helm.sh/helm/v3/cmd/helm@v<HELM_VERSION>` with the version stamps of helm's Makefile.
#
# Output: ${XIDPIPE_CACHE:-$HOME/.cache/xidpipe}/testcluster/<key>/bin/{kube-apiserver,etcd}, where
# <key> hashes the pinned versions, both wrapper modules (go.mod, go.sum), the Go version and the
# build recipe below. A new key means a new build; an existing one is reused as is.
# Environment: GOFLAGS (default -p=2, for small machines), GOMODCACHE and GOCACHE as usual for Go.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

export PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--p=2}"
command -v go >/dev/null || { echo "build.sh: go not found (need Go >= 1.26)" >&2; exit 2; }

# Anything that changes the binaries belongs in the recipe string, so that it changes the key.
recipe="trimpath cgo0 ldflags-s-w version-x v1"
key="$( { echo "$recipe"; go env GOVERSION GOOS GOARCH; cat "$here/versions.env" \
          "$here/kube-apiserver/go.mod" "$here/kube-apiserver/go.sum" \
          "$here/etcd/go.mod" "$here/etcd/go.sum"; } | sha256sum | cut -c1-16)"
root="${XIDPIPE_CACHE:-$HOME/.cache/xidpipe}/testcluster/$key"
bin="$root/bin"

HELM_VERSION=3.22.0
helm_root="${XIDPIPE_CACHE:-$HOME/.cache/xidpipe}/helm/v$HELM_VERSION-$(go env GOVERSION)"
helm="$helm_root/bin/helm"

build_helm() {
  if [[ -x "$helm" ]]; then
    echo "helm: up to date (v$HELM_VERSION): $helm"
    return 0
  fi
  local t0=$SECONDS mod client_go partial_helm
  # helm's Makefile stamps its version and the Kubernetes version it was built against (the
  # default .Capabilities.KubeVersion of `helm template` and `helm lint`) from client-go's.
  mod="$(go mod download -json "helm.sh/helm/v3@v$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  client_go="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$mod")"
  [[ -n "$client_go" ]] || { echo "build.sh: no k8s.io/client-go in $mod" >&2; exit 1; }
  local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
  done
  mkdir -p "$helm_root"
  partial_helm="$(mktemp -d "$helm_root/bin.partial.XXXXXX")"
  echo "helm: building v$HELM_VERSION into $helm (GOFLAGS=$GOFLAGS, $(go env GOVERSION))"
  GOBIN="$partial_helm" go install -trimpath -ldflags="$ldflags" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" \
    || { rm -rf "$partial_helm"; exit 1; }
  rm -rf "$helm_root/bin"
  mv "$partial_helm" "$helm_root/bin"
  echo "helm: built in $((SECONDS - t0))s: $("$helm" version --short)"
}

case "${1:-}" in
  --print-bin-dir) echo "$bin"; exit 0 ;;
  --print-helm) echo "$helm"; exit 0 ;;
  --force) rm -rf "$bin" "$helm_root/bin" ;;
  "") ;;
  *) echo "usage: $0 [--print-bin-dir|--print-helm|--force]" >&2; exit 2 ;;
esac

build_helm

if [[ -x "$bin/kube-apiserver" && -x "$bin/etcd" ]]; then
  echo "testcluster: up to date (k8s v$K8S_VERSION, etcd v$ETCD_VERSION): $bin"
  exit 0
fi

mkdir -p "$root"
partial="$(mktemp -d "$root/bin.partial.XXXXXX")"
trap 'rm -rf "$partial"' EXIT
start=$SECONDS
echo "testcluster: building k8s v$K8S_VERSION kube-apiserver and etcd v$ETCD_VERSION into $bin" \
     "(GOFLAGS=$GOFLAGS, $(go env GOVERSION))"

# Version stamps, as the upstream builds set them (hack/lib/version.sh, etcd's ./build).
k8s_date="$(cd "$here/kube-apiserver" && go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
k8s_minor="${K8S_VERSION#*.}"; k8s_minor="${k8s_minor%%.*}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=${K8S_VERSION%%.*}"
  k8s_ldflags+=" -X $pkg.gitMinor=$k8s_minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=$k8s_date"
  k8s_ldflags+=" -X $pkg.gitCommit="
done
etcd_ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$ETCD_VERSION"

t0=$SECONDS
go build -C "$here/etcd" -trimpath -ldflags="$etcd_ldflags" -o "$partial/etcd" go.etcd.io/etcd/server/v3
echo "testcluster: etcd built in $((SECONDS - t0))s"
t0=$SECONDS
go build -C "$here/kube-apiserver" -trimpath -ldflags="$k8s_ldflags" -o "$partial/kube-apiserver" \
  k8s.io/kubernetes/cmd/kube-apiserver
echo "testcluster: kube-apiserver built in $((SECONDS - t0))s"

rm -rf "$bin"
mv "$partial" "$bin"
trap - EXIT
elapsed=$((SECONDS - start))
{ echo "k8s=v$K8S_VERSION etcd=v$ETCD_VERSION go=$(go env GOVERSION) GOFLAGS=$GOFLAGS"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) seconds=$elapsed"; } > "$root/build-info.txt"
echo "testcluster: build time ${elapsed}s (cold if GOCACHE was empty); binaries in $bin"
ls -l "$bin"
