#!/usr/bin/env bash
# Builds containerd 2.x for the one-node cluster (hack/cluster/up.sh): containerd (with its
# built-in CRI plugin), containerd-shim-runc-v2 and ctr, from the nested module
# test/containerd-bins, from the Go module proxy. runc itself is Debian's (hack/cluster/deps.sh).
#
# The binaries land in ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/containerd-<version>-<hash>/out
# (<hash>: go.mod, go.sum, this script, `go version`).
#
# Usage: hack/build-containerd.sh   (the directory is the last line on stdout)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src="$root/test/containerd-bins"
# shellcheck source=cluster/cache.sh
source "$root/hack/cluster/cache.sh"

mod=github.com/containerd/containerd/v2
version=$(awk -v m="$mod" '$1 == m { print $2; exit }' "$src/go.mod")
[[ -n "$version" ]] || { echo "build-containerd: no $mod requirement in $src/go.mod" >&2; exit 1; }

build() {
  local out=$1
  echo "build-containerd: building containerd $version; cold: a few minutes" >&2
  (
    cd "$src"
    export GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off
    # CGO_ENABLED=0: static binaries; it leaves out only the btrfs snapshotter (its build tag
    # needs cgo), which this node does not use (overlayfs, native as the fallback).
    export CGO_ENABLED=0
    go build -trimpath \
      -ldflags "-s -w -X $mod/version.Version=$version -X $mod/version.Revision=module-proxy" \
      -o "$out/" \
      "$mod/cmd/containerd" "$mod/cmd/containerd-shim-runc-v2" "$mod/cmd/ctr"
  )
}

cached_build "containerd-$version" "$(hash_inputs "$src/go.mod" "$src/go.sum" "${BASH_SOURCE[0]}")" build \
  containerd containerd-shim-runc-v2 ctr
