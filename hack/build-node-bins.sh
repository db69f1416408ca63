#!/usr/bin/env bash
# Builds the node-side Kubernetes binaries of the one-node cluster (hack/cluster/up.sh):
# kubelet, kube-scheduler and kube-proxy, from the nested module test/k8s-node-bins, which pins
# the same k8s.io/kubernetes as test/k8s-bins (checked below), from the Go module proxy.
#
# The binaries land in ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/node-k8s-<version>-<hash>/out
# (<hash>: go.mod, go.sum, this script, `go version`). The control plane (etcd,
# kube-apiserver, kube-controller-manager, kubectl) stays hack/build-k8s-bins.sh's.
#
# Usage: hack/build-node-bins.sh   (the directory is the last line on stdout)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src="$root/test/k8s-node-bins"
# shellcheck source=cluster/cache.sh
source "$root/hack/cluster/cache.sh"

pin() { awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$1"; }
k8s_version=$(pin "$src/go.mod")
if [[ "$k8s_version" != "$(pin "$root/test/k8s-bins/go.mod")" ]]; then
  echo "build-node-bins: test/k8s-node-bins pins k8s.io/kubernetes $k8s_version, test/k8s-bins $(pin "$root/test/k8s-bins/go.mod"): the node and the control plane must be one release" >&2
  exit 1
fi

build() {
  local out=$1
  local minor=${k8s_version#v*.} major=${k8s_version#v}
  minor=${minor%%.*}
  major=${major%%.*}
  # Stamped as Kubernetes' own build does, so the node reports the real release
  # (kubectl get nodes, /version), not v0.0.0-master.
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "build-node-bins: building kubelet, kube-scheduler, kube-proxy ($k8s_version); cold: several minutes" >&2
  (
    cd "$src"
    # Not vendored: override a caller's -mod=vendor; readonly: go.sum is committed and complete.
    # CGO_ENABLED=0: static binaries, as Kubernetes releases them.
    export GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off CGO_ENABLED=0
    go build -trimpath -ldflags "$ldflags" -o "$out/" \
      k8s.io/kubernetes/cmd/kubelet \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kube-proxy
  )
}

cached_build "node-k8s-$k8s_version" "$(hash_inputs "$src/go.mod" "$src/go.sum" "${BASH_SOURCE[0]}")" build \
  kubelet kube-scheduler kube-proxy
