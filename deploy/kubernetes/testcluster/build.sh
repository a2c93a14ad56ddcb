#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kubelet and kubectl from Debian bookworm's
# `kubernetes` source package (upstream 1.20.2 with its vendor/), once per package version,
# into a cache outside the checkout; print the folder of the binaries.
#
#   deploy/kubernetes/testcluster/build.sh            # -> /var/cache/horizon-kubernetes/<version>/bin
#   HORIZON_K8S_CACHE=/somewhere deploy/kubernetes/testcluster/build.sh
#
# Why these steps (measured on a 2-core Debian bookworm machine, docs/backends.md "Kubernetes"):
# * the Go module proxy is not reachable here, so only a tree with its vendor/ builds, and Debian's
#   Go 1.19 builds 1.20 in GOPATH mode (`make WHAT=...`, as debian/rules does; the Makefile runs
#   the code generators, openapi-gen among them, first);
# * the vendored modern-go/reflect2 1.0.1 crashes the apiserver on Go >= 1.18 (fatal error in
#   reflect.mapiterinit): Debian's golang-github-modern-go-reflect2-dev (1.0.2) replaces it.
set -euo pipefail

VERSION="1.20.5+really1.20.2-1.1+deb12u1"
ORIG="kubernetes_1.20.5+really1.20.2.orig.tar.gz"
DEBIAN="kubernetes_${VERSION}.debian.tar.xz"
POOL="http://deb.debian.org/debian/pool/main/k/kubernetes"
declare -A SHA256=(
  ["$ORIG"]=b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc
  ["$DEBIAN"]=9b6e5fd41769d2b5badf2e73b274e3bcd90f85e13d06a1a4a845ccce018127d8
)
CACHE="${HORIZON_K8S_CACHE:-/var/cache/horizon-kubernetes}/${VERSION}"
BIN="$CACHE/bin"
BINARIES=(kube-apiserver kube-controller-manager kubelet kubectl)

have_all() { for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done; }
if have_all; then echo "$BIN"; exit 0; fi

say() { echo "build.sh: $*" >&2; }
need=()
for pkg in golang-go golang-github-modern-go-reflect2-dev jq rsync make curl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

mkdir -p "$CACHE/src"
cd "$CACHE/src"
for f in "$ORIG" "$DEBIAN"; do
  if [ ! -f "$f" ] || ! echo "${SHA256[$f]}  $f" | sha256sum -c --status; then
    say "fetching $f"
    curl -sSf -o "$f.part" "$POOL/$f" && mv "$f.part" "$f"
    echo "${SHA256[$f]}  $f" | sha256sum -c --status || { say "$f: checksum mismatch"; exit 1; }
  fi
done
TREE="$CACHE/tree"
if [ ! -f "$TREE/.unpacked" ]; then
  rm -rf "$TREE" && mkdir -p "$TREE"
  tar -xzf "$ORIG" -C "$TREE" --strip-components=1
  tar -xJf "$DEBIAN" -C "$TREE"
  (cd "$TREE" && while read -r patch; do
     [ -n "$patch" ] && [ "${patch#\#}" = "$patch" ] && patch -s -p1 < "debian/patches/$patch"
   done < debian/patches/series)
  rm -rf "$TREE/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$TREE/vendor/github.com/modern-go/reflect2"
  touch "$TREE/.unpacked"
fi

cd "$TREE"
export GOPATH="$TREE/.go" GOCACHE="$CACHE/gocache" CGO_ENABLED=0 GOFLAGS= GO111MODULE=off
export PATH="/usr/lib/go/bin:$PATH" HOME="$CACHE/home"
mkdir -p .go/src/k8s.io "$HOME"
[ -L .go/src/k8s.io/kubernetes ] || ln -s ../../.. .go/src/k8s.io/kubernetes
start=$(date +%s)
say "building ${BINARIES[*]} (cold: about 7 minutes on 2 cores)"
make WHAT="$(printf 'cmd/%s ' "${BINARIES[@]}")" >&2
mkdir -p "$BIN"
for b in "${BINARIES[@]}"; do cp "_output/bin/$b" "$BIN/$b.part" && mv "$BIN/$b.part" "$BIN/$b"; done
say "built in $(( $(date +%s) - start )) s"
echo "$BIN"
