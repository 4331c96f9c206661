#!/usr/bin/env bash
# Build the test components from the Go module proxy, in parallel, each into its own cache
# directory (what `make testcluster` runs):
#
#   kubernetes    kube-apiserver, kube-scheduler, kube-controller-manager (k8s.io/kubernetes, one
#                 `go build` of the wrapper module kubernetes/, so their shared packages compile once)
#   etcd          etcd (wrapper module etcd/)
#   helm          helm, for the chart's tests (go install helm.sh/helm/v3/cmd/helm@VERSION)
#   kwok          kwok, fake kubelets (go install sigs.k8s.io/kwok/cmd/kwok@VERSION)
#   alertmanager  alertmanager (github.com/prometheus/alertmanager/cmd/alertmanager, built from a copy
#                 of the module with a placeholder for its npm-built web UI: see build_alertmanager)
#   promtool      promtool (go install github.com/prometheus/prometheus/cmd/promtool@VERSION, built
#                 with the tag remove_all_sd: no cloud service discovery, which rule checks and
#                 rule unit tests never use)
#
#   deploy/testcluster/build.sh [COMPONENT...]       build what is missing (default: all), in parallel
#   deploy/testcluster/build.sh --force [COMPONENT...]   rebuild even if present
#   deploy/testcluster/build.sh --print-bin NAME...  print where each binary is (or would be); no build
#   deploy/testcluster/build.sh --print-helm         the same as --print-bin helm
#
# Output: ${XIDPIPE_CACHE:-$HOME/.cache/xidpipe}/<component>/v<version>-<key>/bin/, where <key>
# hashes the component's version, its build function below (so any change of the recipe gives a new
# key), the Go version and, for the two wrapper modules, their go.mod and go.sum. An existing bin/ is
# reused as is; a build goes to bin.partial.* and is renamed into place, under a lock per component
# (two builds of the same component at once: the second waits and finds it built). Each component's
# log and time: <component>/v<version>-<key>/build.log and build-info.txt.
# Environment: GOFLAGS (default -p=2, for small machines), GOMODCACHE and GOCACHE as usual for Go.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"

export PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--p=2}"
command -v go >/dev/null || { echo "build.sh: go not found (need Go >= 1.26)" >&2; exit 2; }

cache="${XIDPIPE_CACHE:-$HOME/.cache/xidpipe}"
COMPONENTS=(kubernetes etcd helm kwok alertmanager promtool)
declare -A BINARIES=(
  [kubernetes]="kube-apiserver kube-scheduler kube-controller-manager" [etcd]=etcd [helm]=helm
  [kwok]=kwok [alertmanager]=alertmanager [promtool]=promtool
)
declare -A VERSIONS=(
  [kubernetes]=$K8S_VERSION [etcd]=$ETCD_VERSION [helm]=$HELM_VERSION [kwok]=$KWOK_VERSION
  [alertmanager]=$ALERTMANAGER_VERSION [promtool]=$PROMETHEUS_VERSION
)

# The release time of MODULE@VERSION from the module proxy, formatted with Go layout $3: a
# reproducible build date (the commit hash is not available from the proxy and is left empty).
release_time() { go list -m -f "{{.Time.Format \"$3\"}}" "$1@$2"; }

# -- The recipes: build_<component> OUT_DIR ------------------------------------------------------
build_kubernetes() {
  # Version stamps as the upstream build sets them (hack/lib/version.sh).
  local date minor ldflags="-s -w" pkg
  date="$(cd "$here/kubernetes" && go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
  minor="${K8S_VERSION#*.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v$K8S_VERSION -X $pkg.gitMajor=${K8S_VERSION%%.*}"
    ldflags+=" -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date -X $pkg.gitCommit="
  done
  go build -C "$here/kubernetes" -trimpath -ldflags="$ldflags" -o "$1/" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager
}

build_etcd() {
  go build -C "$here/etcd" -trimpath -ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$ETCD_VERSION" \
    -o "$1/etcd" go.etcd.io/etcd/server/v3
}

build_helm() {
  # helm's Makefile stamps its version and the Kubernetes version it was built against (the
  # default .Capabilities.KubeVersion of `helm template` and `helm lint`) from client-go's.
  local mod client_go ldflags pkg
  mod="$(go mod download -json "helm.sh/helm/v3@v$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  client_go="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$mod")"
  [[ -n "$client_go" ]] || { echo "no k8s.io/client-go in $mod" >&2; return 1; }
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
  ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go"
  done
  GOBIN="$1" go install -trimpath -ldflags="$ldflags" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
}

build_kwok() {
  # The release's own consts.Version is its version already; no stamp is needed.
  GOBIN="$1" go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
}

# Prometheus' stamps (.promu.yml): github.com/prometheus/common/version.{Version,Revision,Branch,BuildUser,BuildDate}.
prometheus_ldflags() {  # VERSION DATE
  local v=github.com/prometheus/common/version
  echo "-s -w -X $v.Version=$1 -X $v.Revision= -X $v.Branch= -X $v.BuildUser=xidpipe-testcluster -X $v.BuildDate=$2"
}

build_alertmanager() {
  # Since v0.32 Alertmanager embeds its web UI from ui/app/dist, which its release process builds
  # with npm and which the Go module does not contain, so `go install` fails ("pattern app/dist:
  # no matching files found"). It is built from a copy of the module with a placeholder page in
  # place of the UI; everything else (the API, routing, grouping, inhibition, silences,
  # notifications) is the release's own code, built with the release's own go.sum.
  local mod=github.com/prometheus/alertmanager dir date src ui
  dir="$(go mod download -json "$mod@v$ALERTMANAGER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  date="$(release_time "$mod" "v$ALERTMANAGER_VERSION" 20060102-15:04:05)"
  src="$(mktemp -d)"
  cp -R "$dir/." "$src"
  chmod -R u+w "$src"
  for ui in elm mantine; do
    mkdir -p "$src/ui/app/dist/$ui"
    echo '<!doctype html><title>Alertmanager</title><p>No web UI in this build: the API is at /api/v2.</p>' \
      >"$src/ui/app/dist/$ui/index.html"
  done
  go build -C "$src" -trimpath -ldflags="$(prometheus_ldflags "$ALERTMANAGER_VERSION" "$date")" \
    -o "$1/alertmanager" ./cmd/alertmanager || { rm -rf "$src"; return 1; }
  rm -rf "$src"
}

build_promtool() {
  # The module is versioned v0.3XX.Y for Prometheus 3.XX.Y; its VERSION file says which.
  local mod=github.com/prometheus/prometheus dir date
  dir="$(go mod download -json "$mod@v$PROMETHEUS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  date="$(release_time "$mod" "v$PROMETHEUS_VERSION" 20060102-15:04:05)"
  GOBIN="$1" go install -trimpath -tags remove_all_sd \
    -ldflags="$(prometheus_ldflags "$(cat "$dir/VERSION")" "$date")" "$mod/cmd/promtool@v$PROMETHEUS_VERSION"
}

# -- Cache directories ----------------------------------------------------------------------------
goenv="$(go env GOVERSION GOOS GOARCH | tr '\n' ' ')"

component_root() {
  local c=$1 key
  key="$( { echo "$goenv ${VERSIONS[$c]}"; declare -f "build_$c" release_time prometheus_ldflags
            if [[ -d "$here/$c" ]]; then cat "$here/$c/go.mod" "$here/$c/go.sum"; fi
          } | sha256sum | cut -c1-12)"
  echo "$cache/$c/v${VERSIONS[$c]}-$key"
}

component_of() {
  local c b
  for c in "${COMPONENTS[@]}"; do
    for b in ${BINARIES[$c]}; do [[ "$b" == "$1" ]] && { echo "$c"; return 0; }; done
  done
  echo "build.sh: no component builds '$1' (binaries: ${BINARIES[*]})" >&2
  return 2
}

built() {  # COMPONENT DIR: every binary of COMPONENT is in DIR
  local b
  for b in ${BINARIES[$1]}; do [[ -x "$2/$b" ]] || return 1; done
}

# CPU=user + system seconds of this (sub)shell's finished children: the second line of `times`,
# which must run in this shell itself (in a pipe or $(...) it would count a new process's: none).
cpu_seconds() {  # SCRATCH_FILE
  times >"$1"
  CPU="$(sed -n 2p "$1" | awk '{ split($1, u, "m"); split($2, s, "m"); printf "%d", u[1]*60 + u[2] + s[1]*60 + s[2] }')"
}

# Build one component if its bin/ is missing; everything it prints goes to its build.log.
build_component() {
  local c=$1 root partial t0 cpu status=0
  root="$(component_root "$c")"
  mkdir -p "$root"
  exec 9>"$root/.lock"
  flock 9
  if built "$c" "$root/bin"; then
    echo "$c: up to date (v${VERSIONS[$c]}): $root/bin"
    return 0
  fi
  partial="$(mktemp -d "$root/bin.partial.XXXXXX")"
  chmod 755 "$partial"
  t0=$SECONDS
  echo "$c: building v${VERSIONS[$c]} into $root/bin (log: $root/build.log)"
  "build_$c" "$partial" >"$root/build.log" 2>&1 || status=$?
  if (( status == 0 )) && ! built "$c" "$partial"; then
    echo "missing from the build: ${BINARIES[$c]} (found: $(ls "$partial"))" >>"$root/build.log"
    status=1
  fi
  if (( status != 0 )); then
    rm -rf "$partial"
    echo "$c: FAILED after $((SECONDS - t0))s; last lines of $root/build.log:" >&2
    tail -n 30 "$root/build.log" >&2
    return 1
  fi
  rm -rf "$root/bin"
  mv "$partial" "$root/bin"
  cpu_seconds "$root/times.txt"
  cpu=$CPU
  { echo "component=$c version=v${VERSIONS[$c]} go=$(go env GOVERSION) GOFLAGS=$GOFLAGS"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) seconds=$((SECONDS - t0)) cpu_seconds=$cpu"; } >"$root/build-info.txt"
  echo "$c: built in $((SECONDS - t0))s (CPU ${cpu}s): $(cd "$root/bin" && ls | tr '\n' ' ')"
}

# -- Command line ---------------------------------------------------------------------------------
force=0
case "${1:-}" in
  --print-bin)
    shift
    for name in "$@"; do c="$(component_of "$name")"; echo "$(component_root "$c")/bin/$name"; done
    exit 0 ;;
  --print-helm) echo "$(component_root helm)/bin/helm"; exit 0 ;;
  --force) force=1; shift ;;
  -*) echo "usage: $0 [--force] [COMPONENT...] | --print-bin NAME... | --print-helm" >&2; exit 2 ;;
esac
selected=("$@")
(( ${#selected[@]} )) || selected=("${COMPONENTS[@]}")
for c in "${selected[@]}"; do
  [[ -n "${BINARIES[$c]:-}" ]] || { echo "build.sh: unknown component '$c' (${COMPONENTS[*]})" >&2; exit 2; }
  if (( force )); then rm -rf "$(component_root "$c")/bin"; fi
done

start=$SECONDS
echo "testcluster: ${selected[*]} (GOFLAGS=$GOFLAGS, $(go env GOVERSION), cache $cache)"
declare -A pids=()
for c in "${selected[@]}"; do
  build_component "$c" &
  pids[$c]=$!
done
failed=()
for c in "${selected[@]}"; do
  wait "${pids[$c]}" || failed+=("$c")
done
if (( ${#failed[@]} )); then
  echo "testcluster: failed: ${failed[*]}" >&2
  exit 1
fi
echo "testcluster: ready in $((SECONDS - start))s (cold if GOCACHE was empty)"
