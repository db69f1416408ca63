#!/usr/bin/env bash
# Builds Kubernetes' own end-to-end test binary, e2e.test (`go test -c k8s.io/kubernetes/test/e2e`,
# every suite of the release, the manifests it deploys embedded), and agnhost, the test image's
# binary (test/images/agnhost), from the Go module proxy at the release the nested module
# test/k8s-e2e pins (v1.36.3, the cluster's): no release tarball, no image pull. ginkgo's CLI is
# not needed: e2e.test runs the specs itself (-ginkgo.focus, -ginkgo.skip, -report-dir).
#
# The binaries land in ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/k8s-e2e-<version>-<hash>/out
# (hack/cluster/cache.sh: <hash> covers test/k8s-e2e/go.mod and go.sum, this script and `go version`); a warm call
# returns at once. A cold build is long (e2e.test links most of Kubernetes): see docs/k8s-e2e.md.
#
# Usage: hack/build-k8s-e2e.sh    prints the directory holding e2e.test and agnhost, last line.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=cluster/cache.sh
source "$root/hack/cluster/cache.sh"
src="$root/test/k8s-e2e"

k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3; exit } $1 == "k8s.io/kubernetes" { print $2; exit }' "$src/go.mod")
if [[ -z "$k8s_version" ]]; then
  echo "build-k8s-e2e: no k8s.io/kubernetes requirement in $src/go.mod" >&2
  exit 1
fi
if [[ $# -gt 0 ]]; then
  echo "usage: $0" >&2
  exit 2
fi

build() {
  local out=$1 major minor ldflags pkg
  major=${k8s_version#v}
  major=${major%%.*}
  minor=${k8s_version#v*.}
  minor=${minor%%.*}
  ldflags="-s -w"
  # The version stamps of Kubernetes' own build: e2e.test logs and checks the server's version
  # against its own.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "build-k8s-e2e: building e2e.test and agnhost ($k8s_version) into $out"
  cd "$src"
  # Not vendored (the main module is): readonly, go.sum is committed and complete.
  # -buildvcs=false: the binaries depend on the hashed inputs only.
  export GOFLAGS="-mod=readonly -buildvcs=false" GOWORK=off CGO_ENABLED=0
  # Two cores shared with other builds: stay behind interactive work. -vet=off: these are
  # released sources; vetting them would only cost minutes.
  nice -n 10 go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$out/e2e.test" k8s.io/kubernetes/test/e2e
  nice -n 10 go build -trimpath -ldflags "-s -w" -o "$out/agnhost" k8s.io/kubernetes/test/images/agnhost
}

# The inputs: what selects the modules, and this script (not the rest of test/k8s-e2e).
cached_build "k8s-e2e-$k8s_version" "$(hash_inputs "$src/go.mod" "$src/go.sum" "${BASH_SOURCE[0]}")" build e2e.test agnhost | tail -1
