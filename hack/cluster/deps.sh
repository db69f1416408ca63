#!/usr/bin/env bash
# What the one-node cluster (make test-cluster, make test-k8s-e2e*) takes from the machine
# rather than building it, and the Debian package of each: the namespace and mount tools
# (iproute2's ip, util-linux's nsenter/unshare/setsid/flock/mountpoint, mount's
# mount/umount/losetup), procps (sysctl, ps), runc, the CNI plugins (bridge, host-local,
# loopback, portmap), iptables and conntrack (kube-proxy, portmap), busybox-static and socat (put
# into images), xfsprogs (TestVolumeAutoscaler grows an XFS online: ext4's online resize needs
# CAP_SYS_RESOURCE, which this machine withholds from root), openssl (the cluster's
# certificates), curl and CA certificates. Prometheus is not taken from Debian (its package has
# no Kubernetes discovery): TestOperations runs hack/build-prometheus.sh's and
# hack/build-prometheus-operator.sh's builds.
#
#   hack/cluster/deps.sh           installs what is missing (root; a machine that has it all is
#                                  left alone): what .ci/run and hack/cluster/up.sh do
#   hack/cluster/deps.sh --check   installs nothing: lists what is missing on stderr, exit 1
#                                  (hack/cluster/require.sh uses it)
set -euo pipefail

# command-or-file package
needs=(
  "ip iproute2"
  "nsenter util-linux"
  "unshare util-linux"
  "setsid util-linux"
  "flock util-linux"
  "mountpoint util-linux"
  "mount mount"
  "umount mount"
  "losetup mount"
  "mkfs.xfs xfsprogs"
  "xfs_growfs xfsprogs"
  "sysctl procps"
  "ps procps"
  "runc runc"
  "/usr/lib/cni/bridge containernetworking-plugins"
  "/usr/lib/cni/host-local containernetworking-plugins"
  "/usr/lib/cni/loopback containernetworking-plugins"
  "/usr/lib/cni/portmap containernetworking-plugins"
  "iptables iptables"
  "iptables-restore iptables"
  "conntrack conntrack"
  "/bin/busybox busybox-static"
  "/usr/bin/socat socat"
  "ldd libc-bin"
  "openssl openssl"
  "curl curl"
  "/etc/ssl/certs/ca-certificates.crt ca-certificates"
)

# missing: the packages of what is not here, one a line, sorted; the missing names on fd 3.
missing() {
  local n what pkg
  for n in "${needs[@]}"; do
    read -r what pkg <<<"$n"
    if [[ "$what" == /* ]]; then
      [[ -e "$what" ]] && continue
    else
      command -v "$what" >/dev/null 2>&1 && continue
    fi
    echo "$what" >&3
    echo "$pkg"
  done | sort -u
}

check=false
case "${1:-}" in
--check) check=true ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

names=$(mktemp)
trap 'rm -f "$names"' EXIT
mapfile -t pkgs < <(missing 3>"$names")
((${#pkgs[@]} == 0)) && exit 0
if $check || [[ $(id -u) -ne 0 ]]; then
  echo "cluster: missing $(sort -u "$names" | tr '\n' ' ')(Debian packages ${pkgs[*]}; as root, hack/cluster/deps.sh installs them)" >&2
  exit 1
fi
echo "cluster: installing ${pkgs[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# The lock timeout: another apt-get (a second make target) may be installing at the same time.
apt=(apt-get -o DPkg::Lock::Timeout=600)
"${apt[@]}" update -qq >&2
"${apt[@]}" install -y -qq --no-install-recommends "${pkgs[@]}" >&2
# What the packages did not bring is a failure here, not a skip later.
rm -f "$names"
exec bash "${BASH_SOURCE[0]}" --check
