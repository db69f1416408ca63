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

# shellcheck source=require.sh
source "$root/hack/cluster/require.sh" test-cluster

cd "$root"
# Debian's prometheus scrapes the resizer's pods in TestOperations.
if ! command -v prometheus >/dev/null 2>&1; then
  echo "test-cluster: installing Debian's prometheus" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2 ||
    { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2; }
fi
bash hack/build-k8s-bins.sh >/dev/null
exec go test -tags cluster -count=1 -timeout "${CLUSTER_TEST_TIMEOUT:-40m}" -v -run "${RUN:-.}" ./test/cluster/
