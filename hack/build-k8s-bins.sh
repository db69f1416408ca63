#!/usr/bin/env bash
# Builds the binaries the integration tests run as real processes: etcd,
# kube-apiserver, kube-controller-manager, kubectl and the mock CSI driver,
# from the nested module test/k8s-bins (pinned k8s.io/kubernetes + etcd, all
# from the Go module proxy: no release tarball, no Docker).
#
# The binaries land in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/k8s-<version>-<hash>/bin
# where <hash> covers every build input (go.mod, go.sum, the non-test *.go
# files of test/k8s-bins, this script and `go version`), so a change of any of them
# builds into a new directory and an unchanged tree never rebuilds. The cold
# build takes ~10 min on 2 cores; a warm call returns at once.
#
# Usage: hack/build-k8s-bins.sh [--print-dir]
#   The bin directory is the last line on stdout; build output goes to stderr.
#   --print-dir only prints the directory, without building.
# Safe to run concurrently: builders serialize on a lock in the cache dir and
# publish the bin directory with an atomic rename.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src="$root/test/k8s-bins"
binaries=(etcd kube-apiserver kube-controller-manager kubectl mock-csi-driver)

k8s_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$src/go.mod")
if [[ -z "$k8s_version" ]]; then
  echo "build-k8s-bins: no k8s.io/kubernetes requirement in $src/go.mod" >&2
  exit 1
fi

# Hash of the inputs, stable across checkouts: file names relative to $src
# and their contents, in a fixed order.
inputs_hash() {
  {
    go version
    (cd "$src" && find . \( -name '*.go' ! -name '*_test.go' \) -o -name go.mod -o -name go.sum | LC_ALL=C sort | while read -r f; do
      printf '%s\n' "$f"
      cat "$f"
    done)
    cat "$root/hack/build-k8s-bins.sh"
  } | sha256sum | cut -c1-16
}

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer"
dir="$cache_root/k8s-$k8s_version-$(inputs_hash)"
bin="$dir/bin"

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$bin"
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--print-dir]" >&2
  exit 2
fi

complete() {
  [[ -f "$bin/.complete" ]] || return 1
  local b
  for b in "${binaries[@]}"; do
    [[ -x "$bin/$b" ]] || return 1
  done
}

if complete; then
  # Last-use stamp for the pruning below.
  touch "$bin/.complete" 2>/dev/null || true
  echo "$bin"
  exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
if ! flock -n 9; then
  echo "build-k8s-bins: another build of $dir is running, waiting for it" >&2
  flock 9
fi
# The build we waited for may have produced everything.
if complete; then
  echo "$bin"
  exit 0
fi

tmp="$dir/bin.tmp.$$"
rm -rf "$tmp" "$bin"
trap 'rm -rf "$tmp"' EXIT

minor=${k8s_version#v*.}
minor=${minor%%.*}
major=${k8s_version#v}
major=${major%%.*}
ldflags="-s -w"
# Stamp the version the way Kubernetes' own build does, so /version and
# `kubectl version` report the real release instead of v0.0.0-master.
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

echo "build-k8s-bins: building ${binaries[*]} ($k8s_version) into $bin; a cold build takes ~10 min" >&2
start=$(date +%s)
(
  cd "$src"
  # The nested module is not vendored (the main module is): override any
  # GOFLAGS=-mod=vendor from the caller. readonly, not mod: go.sum is
  # committed and complete, and a build must never rewrite it.
  # -buildvcs=false: the binaries must depend only on the hashed inputs,
  # not on the state of the enclosing git checkout.
  export GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off CGO_ENABLED=0
  go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kubectl \
    ./cmd/etcd \
    ./cmd/mock-csi-driver
)
for b in "${binaries[@]}"; do
  [[ -x "$tmp/$b" ]] || { echo "build-k8s-bins: $b missing after build" >&2; exit 1; }
done
touch "$tmp/.complete"
mv "$tmp" "$bin"
echo "build-k8s-bins: built in $(( $(date +%s) - start ))s" >&2

# Each change of the inputs leaves the previous ~300 MB set behind; drop sets
# nobody used for a week (warm calls refresh the stamp).
find "$cache_root" -mindepth 3 -maxdepth 3 -path '*/k8s-*/bin/.complete' -mtime +7 2>/dev/null |
  while read -r stale; do
    stale_dir=$(dirname "$(dirname "$stale")")
    [[ "$stale_dir" != "$dir" ]] && rm -rf "$stale_dir"
  done
echo "$bin"
