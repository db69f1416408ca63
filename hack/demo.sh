#!/usr/bin/env bash
# `make demo`: a local control plane (etcd, kube-apiserver and kube-controller-manager on
# 127.0.0.1), the mock CSI driver and csi-resizer, then a resize, an infeasible request and its
# recovery, a VolumeAttributesClass change and a class the driver refuses rolled back, and the
# README's GitOps steps (statefulset-resizer with its webhook; a StatefulSet manifest with a
# bigger volumeClaimTemplates size applied with kubectl; `statefulset-resizer wait`), narrated.
# The walkthrough is the Go test test/demo (TestDemo); this script checks the
# prerequisites, builds what it needs and runs it.
#
# DEMO_KEEP_RUNNING=1 keeps everything running after the walkthrough until Ctrl-C (the
# default when stdin is a terminal); DEMO_KEEP_RUNNING=0 stops after it (the default
# otherwise, e.g. in CI).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

die() {
  echo "demo: $*" >&2
  exit 1
}

# Prerequisites, with what each is for.
[[ "$(uname -s)" == Linux ]] || die "needs Linux (the test harness runs its processes with Linux-only process attributes); this is $(uname -s)"
want_go=$(awk '$1 == "go" { print $2; exit }' go.mod)
declare -A why=(
  [go]="Go >= $want_go, https://go.dev/dl/ (everything is built from source)"
  [git]="git (apt-get install git)"
  [curl]="curl (apt-get install curl), to read the resizer's metrics"
  [flock]="flock (apt-get install util-linux), used by hack/build-k8s-bins.sh"
  [sha256sum]="sha256sum (apt-get install coreutils), used by hack/build-k8s-bins.sh"
)
missing=0
for tool in go git curl flock sha256sum; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "demo: missing $tool: install ${why[$tool]}" >&2
    missing=1
  fi
done
((missing == 0)) || exit 1
# In the module, `go` switches to the toolchain go.mod asks for when GOTOOLCHAIN allows it,
# and fails with its own message otherwise.
if ! have_go=$(go env GOVERSION); then
  die "needs Go >= $want_go (see above; https://go.dev/dl/)"
fi
echo "demo: using $have_go ($(command -v go))"

export GOFLAGS=-mod=vendor
if [[ -z "${DEMO_KEEP_RUNNING:-}" ]]; then
  if [[ -t 0 ]]; then DEMO_KEEP_RUNNING=1; else DEMO_KEEP_RUNNING=0; fi
fi
export DEMO_KEEP_RUNNING
case "$DEMO_KEEP_RUNNING" in
  0 | f | F | false | FALSE | False)
    keep=0
    echo "demo: DEMO_KEEP_RUNNING=$DEMO_KEEP_RUNNING: everything stops after the walkthrough"
    ;;
  *)
    keep=1
    echo "demo: DEMO_KEEP_RUNNING=$DEMO_KEEP_RUNNING: everything keeps running after the walkthrough, until Ctrl-C"
    ;;
esac
# The demo always runs the mock driver; never point it at an e2e driver from the environment.
unset E2E_DRIVER_CMD E2E_DRIVER_ENDPOINT E2E_DRIVER_NAME

# The control plane and the mock driver, cached across runs.
bins_dir=$(bash hack/build-k8s-bins.sh --print-dir)
if [[ ! -f "$bins_dir/.complete" ]]; then
  echo "demo: building etcd, kube-apiserver, kube-controller-manager, kubectl and the mock CSI driver"
  echo "demo: from the Go module proxy. The first run takes about 10 minutes on 2 cores (and ~5 GB"
  echo "demo: of Go build cache); later runs reuse $bins_dir."
fi
start=$(date +%s)
bins_dir=$(bash hack/build-k8s-bins.sh | tail -n 1)
export CSI_RESIZER_K8S_BINS="$bins_dir"
if (($(date +%s) - start > 5)); then
  echo "demo: control-plane binaries built in $(($(date +%s) - start))s"
fi

# The walkthrough, compiled as a test binary and run directly: its narration goes straight
# to the terminal, and Ctrl-C reaches it (it stops every process it started and removes its
# temp dirs before exiting).
demo_bin_dir="${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/demo"
mkdir -p "$demo_bin_dir"
echo "demo: compiling the walkthrough (test/demo)"
go test -tags integration -c -o "$demo_bin_dir/demo.test" ./test/demo/

# A bound on the walkthrough alone; kept running, the demo has no time limit.
timeout=15m
((keep == 0)) || timeout=0
cd test/demo
exec "$demo_bin_dir/demo.test" -test.run '^TestDemo$' -test.timeout="$timeout"
