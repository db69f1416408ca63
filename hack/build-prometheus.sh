#!/usr/bin/env bash
# Builds Prometheus (prometheus and promtool) from its Go module through the Go module proxy, for
# test/cluster's TestOperations: Debian's prometheus package is built without Kubernetes service
# discovery, so it refuses the README's kubernetes_sd_configs and cannot read what the Prometheus
# Operator generates from a ServiceMonitor.
#
# Built with Prometheus' own build tags for a smaller discovery set: remove_all_sd drops every
# service discovery plugin (plugins/plugin_*.go), enable_kubernetes_sd puts Kubernetes back (file
# and http discovery are always in). No web UI assets (builtinassets needs the UI built with npm):
# the HTTP API, which the tests use, is all there. Stamped with its version like its release
# build (`prometheus --version`).
#
# The binaries land in ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/prometheus-<hash>/out, the
# directory printed as the last line on stdout; build output goes to stderr. A cold build (empty Go
# caches) takes several minutes on 2 cores (docs/cluster.md has the figure); a warm call returns at
# once.
#
# Usage: hack/build-prometheus.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=cluster/cache.sh
source "$root/hack/cluster/cache.sh"

# Prometheus 3.16.0: its Go module versions are v0.<major><minor 2 digits>.<patch>. Its go.mod
# needs go >= 1.26.7.
prometheus_version=3.16.0
module=github.com/prometheus/prometheus
module_version=v0.316.0
tags=netgo,remove_all_sd,enable_kubernetes_sd

build() {
  local out=$1
  # Outside any module (the caller's is vendored): `go install pkg@version` uses Prometheus' own
  # go.mod and go.sum (no replace directives), checked against the checksum database.
  # GOTOOLCHAIN=local: a clear error rather than another Go downloaded when ours is too old.
  export GOFLAGS=-mod=mod GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0
  cd "$out"
  local v=github.com/prometheus/common/version
  local ldflags="-s -w -X $v.Version=$prometheus_version -X $v.Revision=$module_version"
  ldflags+=" -X $v.Branch=$module_version -X $v.BuildUser=csi-resizer -X $v.BuildDate=module-proxy"
  echo "build-prometheus: prometheus and promtool $prometheus_version ($module@$module_version, tags $tags)" >&2
  GOBIN="$out" go install -trimpath -tags "$tags" -ldflags "$ldflags" \
    "$module/cmd/prometheus@$module_version" "$module/cmd/promtool@$module_version"
  local got
  got=$("$out/prometheus" --version 2>&1 | head -1)
  [[ "$got" == "prometheus, version $prometheus_version "* ]] ||
    { echo "build-prometheus: built prometheus says '$got', want version $prometheus_version" >&2; return 1; }
}

cached_build prometheus "$(hash_inputs "${BASH_SOURCE[0]}")" build prometheus promtool
