#!/usr/bin/env bash
# make test-cluster: the test/cluster suite on the one-node cluster (docs/cluster.md), which it
# starts (building what is missing: cold, about 20 minutes for containerd, the node binaries and
# the sidecars; cached) and removes when done.
#
# A machine that cannot run the node (not root, no network or mount namespaces, no cgroups, a
# tool missing that hack/cluster/deps.sh cannot install) gets one line and a skip, except under
# CI=true, where the suite must run: there it fails at once. require.sh installs what the
# suite takes from Debian. TestOperations builds Prometheus and the Prometheus Operator
# (hack/build-prometheus.sh, hack/build-prometheus-operator.sh; cached) on first use.
# RUN selects tests (go test -run), CLUSTER_TEST_TIMEOUT bounds the run (default 40m).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# shellcheck source=require.sh
source "$root/hack/cluster/require.sh" test-cluster

cd "$root"
bash hack/build-k8s-bins.sh >/dev/null
exec go test -tags cluster -count=1 -timeout "${CLUSTER_TEST_TIMEOUT:-40m}" -v -run "${RUN:-.}" ./test/cluster/
