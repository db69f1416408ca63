#!/usr/bin/env bash
# Builds the kubernetes-csi sidecars that csi-driver-host-path's kubernetes-1.34 deployment
# runs, from their own Go modules at the tags its manifests name, through the Go module proxy:
#
#   csi-provisioner  github.com/kubernetes-csi/external-provisioner/v6  v6.3.0
#   csi-attacher     github.com/kubernetes-csi/external-attacher/v4     v4.12.0
#   csi-snapshotter  github.com/kubernetes-csi/external-snapshotter/v8  v8.6.0
#
# The other images of that deployment do not come from here: csi-resizer is upstream's anchor
# binary (../shared/anchors/external-resizer), hostpathplugin the anchor hostpathplugin, and
# node-driver-registrar, livenessprobe and external-health-monitor-controller the anchors of those
# names, built from their own source, because the module proxy does not serve those three modules
# (it answers 403 for github.com/kubernetes-csi/{node-driver-registrar,livenessprobe,
# external-health-monitor}). hack/cluster/build-images.sh assembles the images.
#
# Each module is built the way its own Makefile does (CGO_ENABLED=0, -ldflags -X
# main.version=<tag>), from a writable copy of the module's source in the module cache: `go
# install pkg@version` refuses modules whose go.mod has replace directives, and all three have
# some. Module zips leave out nested modules, so external-snapshotter's `replace
# .../client/v8 => ./client` is pointed at the client/v8 module of the same tag instead.
#
# The binaries land in ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/sidecars-<hash>/out.
# Usage: hack/build-sidecars.sh   (the directory is the last line on stdout)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=cluster/cache.sh
source "$root/hack/cluster/cache.sh"

# binary module version package
sidecars=(
  "csi-provisioner github.com/kubernetes-csi/external-provisioner/v6 v6.3.0 ./cmd/csi-provisioner"
  "csi-attacher github.com/kubernetes-csi/external-attacher/v4 v4.12.0 ./cmd/csi-attacher"
  "csi-snapshotter github.com/kubernetes-csi/external-snapshotter/v8 v8.6.0 ./cmd/csi-snapshotter"
)

build() {
  local out=$1 line bin mod version pkg dir work
  # Not the main module's vendor mode; GOFLAGS from a caller must not leak in.
  export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0
  for line in "${sidecars[@]}"; do
    read -r bin mod version pkg <<<"$line"
    echo "build-sidecars: $bin from $mod@$version" >&2
    dir=$(GOFLAGS=-mod=mod go mod download -json "$mod@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    [[ -d "$dir" ]] || { echo "build-sidecars: no source for $mod@$version" >&2; return 1; }
    work=$(mktemp -d "$out/.src.XXXXXX")
    cp -r "$dir/." "$work/"
    chmod -R u+w "$work"
    if grep -q '=> ./client' "$work/go.mod"; then
      # .../external-snapshotter/v8 -> .../external-snapshotter/client/v8
      local client="${mod%/*}/client/${mod##*/}"
      (cd "$work" && go mod edit -replace "$client=$client@$version")
    fi
    (cd "$work" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath \
      -ldflags "-s -w -X main.version=$version" -o "$out/$bin" "$pkg")
    rm -rf "$work"
  done
}

cached_build sidecars "$(hash_inputs "${BASH_SOURCE[0]}")" build \
  csi-provisioner csi-attacher csi-snapshotter
