#!/usr/bin/env bash
# Regenerate the two wrapper modules from the versions in versions.env:
#   kubernetes/go.mod  requires k8s.io/kubernetes v$K8S_VERSION and replaces every staging
#                      module (k8s.io/api, k8s.io/client-go, ...) with its published
#                      v0.<minor>.<patch>; the list is read from that release's own go.mod. Its
#                      tools: kube-apiserver, kube-scheduler, kube-controller-manager.
#   etcd/go.mod        requires go.etcd.io/etcd/server/v3 v$ETCD_VERSION (its go.mod already
#                      requires the sibling etcd modules at the same version).
# KWOK, Alertmanager, promtool and helm need no wrapper: their release modules have no relative
# replace lines, so build.sh installs them with `go install PKG@VERSION` (checked against the
# checksum database) and versions.env is all there is to change.
# Needs the Go module proxy and jq. Commit the resulting go.mod and go.sum files.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
export PATH="/usr/local/go/bin:$PATH" GOFLAGS="${GOFLAGS:--p=2}" GOTOOLCHAIN=local
staging_minor="0.${K8S_VERSION#1.}"

pin_kubernetes() {
  local dir="$here/kubernetes" k8s_gomod
  rm -f "$dir/go.mod" "$dir/go.sum"
  (cd "$dir" && go mod init xidpipe.local/testcluster/kubernetes >/dev/null 2>&1)
  k8s_gomod="$(cd "$dir" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | jq -r .GoMod)"
  # Every `replace k8s.io/X => ./staging/src/k8s.io/X` in the release's go.mod becomes
  # `replace k8s.io/X => k8s.io/X v0.<minor>.<patch>` here.
  go mod edit -json "$k8s_gomod" \
    | jq -r '.Replace[] | select(.New.Path | startswith("./staging/")) | .Old.Path' \
    | sort -u \
    | while read -r mod; do
        (cd "$dir" && go mod edit -replace="$mod=$mod@v$staging_minor")
      done
  (cd "$dir" && go mod edit -go=1.26.0 -require="k8s.io/kubernetes@v$K8S_VERSION" \
     -tool=k8s.io/kubernetes/cmd/kube-apiserver -tool=k8s.io/kubernetes/cmd/kube-scheduler \
     -tool=k8s.io/kubernetes/cmd/kube-controller-manager && go mod tidy)
  echo "kubernetes: k8s.io/kubernetes v$K8S_VERSION, $(grep -c '=> k8s.io/' "$dir/go.mod") staging replaces at v$staging_minor"
}

pin_etcd() {
  local dir="$here/etcd"
  rm -f "$dir/go.mod" "$dir/go.sum"
  (cd "$dir" && go mod init xidpipe.local/testcluster/etcd >/dev/null 2>&1 \
     && go mod edit -go=1.26.0 -require="go.etcd.io/etcd/server/v3@v$ETCD_VERSION" \
          -tool=go.etcd.io/etcd/server/v3 \
     && go mod tidy)
  echo "etcd: go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
}

mkdir -p "$here/kubernetes" "$here/etcd"
pin_kubernetes
pin_etcd
