#!/usr/bin/env bash
# Builds the xidpipe image with podman on a Debian machine that has no Docker engine and no
# container registry (`make image`):
#   1. installs podman, runc and mmdebstrap when missing (Debian packages; needs root);
#   2. makes the base image locally: mmdebstrap of the Debian release the Dockerfile's BASE names,
#      cached as a rootfs tar under ~/.cache/xidpipe/image, imported as localhost/xidpipe-base:<release>;
#   3. builds the Dockerfile unchanged with --build-arg BASE=<that base> and labels the image with a
#      hash of what the build copies; a build whose hash matches the existing image is skipped.
# The base gets a name of its own rather than the official debian:<release>-slim tag, so that a
# locally made rootfs is never mistaken for (or pushed as) Debian's image; the Dockerfile's default
# stays the official one for users with a registry.
#   deploy/image/build.sh [--print-hash] [--force]     IMAGE=xidpipe:dev by default
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
IMAGE=${IMAGE:-xidpipe:dev}
CACHE=${XIDPIPE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/xidpipe}/image
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/image/containers.conf}
RELEASE=$(sed -n 's/^ARG BASE=debian:\([a-z]*\).*/\1/p' Dockerfile)
[ -n "$RELEASE" ] || { echo "build.sh: no 'ARG BASE=debian:<release>' in the Dockerfile" >&2; exit 2; }
BASE_IMAGE=localhost/xidpipe-base:$RELEASE
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# What the image is built from: the Dockerfile, .dockerignore and every file the build copies.
source_hash() {
    find Dockerfile .dockerignore pyproject.toml README.md models agents streams respond history service xidpipe \
        -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
        | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}

ensure_packages() {
    local missing=""
    command -v podman >/dev/null 2>&1 || missing="$missing podman"
    command -v runc >/dev/null 2>&1 || missing="$missing runc"
    command -v mmdebstrap >/dev/null 2>&1 || missing="$missing mmdebstrap"
    if [ -n "$missing" ]; then
        echo "installing Debian packages:$missing"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    fi
}

# Like Debian's -slim images: minbase, without documentation (the dpkg filter stays in the image,
# so the packages the Dockerfile installs leave theirs out too).
ensure_base() {
    podman image exists "$BASE_IMAGE" && return 0
    local tar="$CACHE/debian-$RELEASE-minbase.tar"
    if [ ! -s "$tar" ]; then
        mkdir -p "$CACHE"
        echo "making the $RELEASE base with mmdebstrap (cached in $tar)"
        mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' \
            --aptopt='APT::Install-Recommends "false"' \
            "$RELEASE" "$tar.part" \
            "deb $MIRROR $RELEASE main" "deb $MIRROR $RELEASE-updates main" \
            "deb $SECURITY $RELEASE-security main"
        mv "$tar.part" "$tar"
    fi
    podman import --quiet --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$tar" "$BASE_IMAGE" >/dev/null
}

main() {
    local force=0
    for arg in "$@"; do
        case $arg in
            --print-hash) source_hash; return 0 ;;
            --force) force=1 ;;
            *) echo "usage: $0 [--print-hash] [--force]" >&2; return 2 ;;
        esac
    done
    ensure_packages
    local hash built
    hash=$(source_hash)
    built=$(podman image inspect --format '{{ index .Labels "io.xidpipe.source-hash" }}' "$IMAGE" 2>/dev/null || true)
    if [ "$force" = 0 ] && [ "$built" = "$hash" ]; then
        echo "$IMAGE is up to date (source hash $hash)"
        return 0
    fi
    ensure_base
    local started=$SECONDS trust=()
    # pip in the build trusts what this machine trusts (e.g. the CA of a TLS-inspecting proxy).
    local ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
    if [ -s "$ca" ]; then
        trust=(--volume "$(readlink -f "$ca"):/etc/xidpipe-build-ca.crt:ro" --build-arg PIP_CERT=/etc/xidpipe-build-ca.crt)
    fi
    podman build --pull=never "${trust[@]}" --build-arg "BASE=$BASE_IMAGE" --build-arg "XIDPIPE_SOURCE_HASH=$hash" \
        --layers --tag "$IMAGE" --file Dockerfile .
    echo "built $IMAGE (source hash $hash) in $((SECONDS - started)) s"
}

main "$@"
