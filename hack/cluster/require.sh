# shellcheck shell=bash
# Sourced by what needs the one-node cluster (hack/cluster/test.sh, hack/k8s-e2e.sh):
#
#   source hack/cluster/require.sh WHAT
#
# returns when this machine can run the node: root, network and mount namespaces, cgroups,
# every program and file the cluster takes from the machine (hack/cluster/deps.sh's list:
# ip, nsenter, mount, runc, the CNI plugins, iptables, ...; installed here from Debian's
# packages when missing), and the anchors its images are made from. Otherwise it says why in
# one line and ends the caller: exit 0 (skipped), or, under CI=true, exit 1 at once, since CI
# must run it: a CI machine without iproute2 fails here instead of passing with no cluster test.
_require_skip() {
  if [[ "${CI:-}" == true ]]; then
    echo "$1: FAIL: $2; CI must run it" >&2
    exit 1
  fi
  echo "$1: skipped: $2"
  exit 0
}
_require_what=${1:?usage: source hack/cluster/require.sh WHAT}
_require_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ $(id -u) -ne 0 ]]; then
  _require_skip "$_require_what" "the one-node cluster needs root (network and mount namespaces, cgroups, containers)"
fi
# Installs what is missing (a no-op when .ci/run or an earlier run did; a failure shows in the
# check), then checks.
bash "$_require_root/hack/cluster/deps.sh" >&2 || true
if ! _require_missing=$(bash "$_require_root/hack/cluster/deps.sh" --check 2>&1); then
  _require_skip "$_require_what" "$_require_missing"
elif ! unshare --net --mount true 2>/dev/null; then
  _require_skip "$_require_what" "the one-node cluster cannot create network and mount namespaces here"
elif [[ ! -d /sys/fs/cgroup ]]; then
  _require_skip "$_require_what" "the one-node cluster needs a cgroup filesystem at /sys/fs/cgroup"
fi
for _require_anchor in hostpathplugin external-resizer csi-driver-host-path-deploy; do
  _require_path="$_require_root/../shared/anchors/$_require_anchor"
  [[ -e "$_require_path" ]] ||
    _require_skip "$_require_what" "no $_require_path (the cluster's csi-driver-host-path and upstream resizer images are made from it)"
done
