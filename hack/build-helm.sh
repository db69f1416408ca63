#!/usr/bin/env bash
# Builds the helm v3 CLI that `make helm-check` and deploy/helm's Go test run, from the Go module
# proxy (helm is a Go module; Debian has no helm package), at a pinned version, the way
# hack/build-k8s-bins.sh builds the Kubernetes binaries: no release tarball, no install script.
#
# The binary lands in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/helm-<version>/bin/helm
# and is stamped like helm's own release build (version, and the Kubernetes version of its
# client-go for `helm template`'s default .Capabilities.KubeVersion and `helm lint`'s deprecation
# checks). The cold build takes a few minutes on 2 cores; a warm call returns at once.
#
# Usage: hack/build-helm.sh [--print-path]
#   The helm binary's path is the last line on stdout; build output goes to stderr.
#   --print-path only prints the path, without building.
# Safe to run concurrently: builders serialize on a lock in the cache dir and publish the bin
# directory with an atomic rename.
set -euo pipefail

# The newest helm v3 release when this was written; its go.mod needs go >= 1.26.0.
helm_version=v3.22.0
module=helm.sh/helm/v3

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer"
dir="$cache_root/helm-$helm_version"
bin="$dir/bin"

if [[ "${1:-}" == "--print-path" ]]; then
  echo "$bin/helm"
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--print-path]" >&2
  exit 2
fi

complete() { [[ -f "$bin/.complete" && -x "$bin/helm" ]]; }

if complete; then
  echo "$bin/helm"
  exit 0
fi

mkdir -p "$dir"
exec 9>"$dir/.lock"
if ! flock -n 9; then
  echo "build-helm: another build of $dir is running, waiting for it" >&2
  flock 9
fi
# The build we waited for may have produced it.
if complete; then
  echo "$bin/helm"
  exit 0
fi

tmp="$dir/bin.tmp.$$"
rm -rf "$tmp" "$bin"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"

# Outside any module (the caller's may be vendored): `go install pkg@version` resolves helm's own
# go.mod and go.sum, checked against the checksum database. GOTOOLCHAIN=local: fail with a clear
# error rather than download another Go toolchain when the local one is too old.
export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
cd "$dir"

# Stamp the Kubernetes version as helm's Makefile does: one minor above the client-go v0.x it
# is built with (client-go v0.37 is Kubernetes 1.37).
if ! gomod=$(go mod download -json "$module@$helm_version" | awk -F'"' '$2 == "GoMod" { print $4 }') || [[ ! -f "$gomod" ]]; then
  echo "build-helm: could not download $module@$helm_version from the Go module proxy ($(go env GOPROXY))" >&2
  exit 1
fi
client_go=$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")
if [[ ! "$client_go" =~ ^v0\.([0-9]+)\. ]]; then
  echo "build-helm: no k8s.io/client-go v0.x requirement in $gomod (got '$client_go')" >&2
  exit 1
fi
k8s_minor=${BASH_REMATCH[1]}
ldflags="-s -w -X $module/internal/version.version=$helm_version -X $module/internal/version.gitTreeState=clean"
for pkg in pkg/chartutil pkg/lint/rules; do
  ldflags+=" -X $module/$pkg.k8sVersionMajor=1 -X $module/$pkg.k8sVersionMinor=$k8s_minor"
done

echo "build-helm: building helm $helm_version (Kubernetes 1.$k8s_minor) into $bin; a cold build takes a few minutes" >&2
start=$(date +%s)
GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "$module/cmd/helm@$helm_version"
[[ -x "$tmp/helm" ]] || { echo "build-helm: helm missing after build" >&2; exit 1; }
got=$("$tmp/helm" version --template '{{.Version}}')
[[ "$got" == "$helm_version" ]] || { echo "build-helm: built helm reports $got, want $helm_version" >&2; exit 1; }
touch "$tmp/.complete"
mv "$tmp" "$bin"
echo "build-helm: built in $(( $(date +%s) - start ))s" >&2
echo "$bin/helm"
