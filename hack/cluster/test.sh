#!/usr/bin/env bash
# make test-cluster: the test/cluster suite on the one-node cluster (docs/cluster.md), which it
# starts (building what is missing: cold, about 20 minutes for containerd, the node binaries and
# the sidecars; cached) and removes when done.
#
# A machine that cannot run the node (not root, no network or mount namespaces, no cgroups, a
# tool missing that hack/cluster/deps.sh cannot install) gets one line and a skip, except under
# CI=true, where the suite must run: there it fails at once. require.sh installs what the
# suite takes from Debian. Prometheus and the Prometheus Operator, which TestOperations runs
# (hack/build-prometheus.sh, hack/build-prometheus-operator.sh; cached; cold, about 13
# CPU-minutes), are built here, before the test binary's timeout starts.
# RUN selects tests (go test -run), CLUSTER_TEST_TIMEOUT bounds the run (default 60m: cold, the
# cluster's start waits for its parts to build, up to 35 minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# shellcheck source=require.sh
source "$root/hack/cluster/require.sh" test-cluster

cd "$root"
bash hack/build-k8s-bins.sh >/dev/null
bash hack/build-prometheus.sh >/dev/null
bash hack/build-prometheus-operator.sh >/dev/null
exec go test -tags cluster -count=1 -timeout "${CLUSTER_TEST_TIMEOUT:-60m}" -v -run "${RUN:-.}" ./test/cluster/
