#!/usr/bin/env bash
# Builds the Prometheus Operator (operator and prometheus-config-reloader) from its Go module
# through the Go module proxy, and keeps its CRDs beside them, for test/cluster's TestOperations:
# the shipped ServiceMonitor and PrometheusRule (deploy/kubernetes/monitoring) are read by the
# real operator there.
#
# v0.85.0 is the only version of github.com/prometheus-operator/prometheus-operator that the
# module proxy serves here (later ones answer 403). Built as its Makefile does (CGO_ENABLED=0,
# the version stamped into github.com/prometheus/common/version), from a writable copy of the
# module's source: its go.mod replaces pkg/apis/monitoring and pkg/client with ./ directories,
# which the module zip leaves out (they are modules of their own), so the replaces are pointed at
# those modules at the same version, as hack/build-sidecars.sh does for external-snapshotter.
#
# The directory ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/prometheus-operator-<hash>/out, printed
# as the last line on stdout, holds the binaries and crds/ (the module's
# example/prometheus-operator-crd). Build output goes to stderr.
#
# Usage: hack/build-prometheus-operator.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=cluster/cache.sh
source "$root/hack/cluster/cache.sh"

module=github.com/prometheus-operator/prometheus-operator
version=v0.85.0

build() {
  local out=$1 dir work
  export GOWORK=off GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0
  dir=$(GOFLAGS=-mod=mod go mod download -json "$module@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -d "$dir" ]] || { echo "build-prometheus-operator: no source for $module@$version" >&2; return 1; }
  work=$(mktemp -d "$out/.src.XXXXXX")
  cp -r "$dir/." "$work/"
  chmod -R u+w "$work"
  local sub
  for sub in pkg/apis/monitoring pkg/client; do
    grep -q "=> ./$sub\$" "$work/go.mod" ||
      { echo "build-prometheus-operator: $module@$version's go.mod no longer replaces $sub with ./$sub" >&2; return 1; }
    (cd "$work" && go mod edit -replace "$module/$sub=$module/$sub@$version")
  done
  local v=github.com/prometheus/common/version
  local ldflags="-s -w -X $v.Version=${version#v} -X $v.Revision=$version -X $v.Branch=$version"
  ldflags+=" -X $v.BuildUser=csi-resizer -X $v.BuildDate=module-proxy"
  echo "build-prometheus-operator: operator and prometheus-config-reloader from $module@$version" >&2
  (cd "$work" && GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath -ldflags "$ldflags" \
    -o "$out/" ./cmd/operator ./cmd/prometheus-config-reloader)
  mkdir "$out/crds"
  cp "$work"/example/prometheus-operator-crd/monitoring.coreos.com_*.yaml "$out/crds/"
  rm -rf "$work"
}

cached_build prometheus-operator "$(hash_inputs "${BASH_SOURCE[0]}")" build \
  operator prometheus-config-reloader crds/monitoring.coreos.com_servicemonitors.yaml \
  crds/monitoring.coreos.com_prometheusrules.yaml crds/monitoring.coreos.com_prometheuses.yaml
