#!/usr/bin/env bash
# make test-cluster: the test/cluster suite on the one-node cluster (docs/cluster.md), which it
# starts (building what is missing: cold, about 20 minutes for containerd, the node binaries and
# the sidecars; cached) and removes when done.
#
# A machine that cannot run the node (not root, no network or mount namespaces, no cgroups) gets
# one line and a skip, except under CI=true, where the suite must run.
# RUN selects tests (go test -run), CLUSTER_TEST_TIMEOUT bounds the run (default 40m).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

why=""
if [[ $(id -u) -ne 0 ]]; then
  why="needs root (network and mount namespaces, cgroups, containers)"
elif ! unshare --net --mount true 2>/dev/null; then
  why="cannot create network and mount namespaces here"
elif [[ ! -d /sys/fs/cgroup ]]; then
  why="no cgroup filesystem at /sys/fs/cgroup"
fi
if [[ -n "$why" ]]; then
  if [[ "${CI:-}" == true ]]; then
    echo "test-cluster: FAIL: the one-node cluster $why; CI must run it" >&2
    exit 1
  fi
  echo "test-cluster: skipped: the one-node cluster $why"
  exit 0
fi

anchors="$root/../shared/anchors"
for a in hostpathplugin external-resizer csi-driver-host-path-deploy; do
  if [[ ! -e "${anchors}/$a" ]]; then
    [[ "${CI:-}" == true ]] && { echo "test-cluster: FAIL: $anchors/$a is missing; CI must run the cluster suite" >&2; exit 1; }
    echo "test-cluster: skipped: no $anchors/$a (csi-driver-host-path and upstream's resizer, for the cluster's images)"
    exit 0
  fi
done

cd "$root"
# Debian's prometheus scrapes the resizer's pods in TestOperations.
if ! command -v prometheus >/dev/null 2>&1; then
  echo "test-cluster: installing Debian's prometheus" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2 ||
    { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2; }
fi
bash hack/build-k8s-bins.sh >/dev/null
exec go test -tags cluster -count=1 -timeout "${CLUSTER_TEST_TIMEOUT:-40m}" -v -run "${RUN:-.}" ./test/cluster/
