# shellcheck shell=bash disable=SC2034 # the variables are for the scripts that source this
# Sourced by hack/cluster/*.sh: the names, addresses and paths of one one-node cluster, and the
# helpers that run things inside it. Everything is derived from two settings, so that a
# person's cluster (make cluster) and a test's cluster (test/cluster) can run side by side:
#
#   CLUSTER_NAME  names the network namespace, the cgroups, the node, the kubeconfig context
#                 (default csi-resizer-node)
#   CLUSTER_DIR   holds every file of the cluster (default /var/tmp/$CLUSTER_NAME)
#   CLUSTER_NET   the first three octets of the /30 between the machine and the node
#                 (default 10.213.0: the machine is .1, the node .2)
#   CLUSTER_VETH  the machine's end of that link (default crnode0; at most 15 characters)
#
# up.sh also reads CLUSTER_IMAGES (minimal: only pause, busybox and the product's image) and
# CLUSTER_KEEP_ON_FAILURE (1: a failed start is left as it is, for a look).

CLUSTER_NAME=${CLUSTER_NAME:-csi-resizer-node}
CLUSTER_DIR=${CLUSTER_DIR:-/var/tmp/$CLUSTER_NAME}
CLUSTER_NET=${CLUSTER_NET:-10.213.0}
CLUSTER_VETH=${CLUSTER_VETH:-crnode0}

if [[ ! "$CLUSTER_NAME" =~ ^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$ ]]; then
  echo "CLUSTER_NAME must be a DNS label of at most 32 characters: $CLUSTER_NAME" >&2
  exit 2
fi
if [[ "$CLUSTER_DIR" != /* || "$CLUSTER_DIR" == / || "$CLUSTER_DIR" =~ /\.\.?(/|$) ]]; then
  echo "CLUSTER_DIR must be an absolute path other than /: $CLUSTER_DIR" >&2
  exit 2
fi
if ((${#CLUSTER_VETH} > 15)); then
  echo "CLUSTER_VETH must have at most 15 characters: $CLUSTER_VETH" >&2
  exit 2
fi

NODE_NAME=$CLUSTER_NAME
NETNS=$CLUSTER_NAME
NETNS_PATH=/run/netns/$NETNS
HOST_IP=$CLUSTER_NET.1
NODE_IP=$CLUSTER_NET.2
# Inside the network namespace only: no route on the machine leads to these.
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
APISERVER_PORT=6443

# The persistent mount namespace: a bind mount of its nsfs file, on a private mount of its own
# (a namespace file may not sit on a shared mount).
NS_DIR=$CLUSTER_DIR/ns
MNTNS=$NS_DIR/mnt
# What the node sees at /var/lib, /var/log and /run (bound there inside its mount namespace).
VAR_LIB=$CLUSTER_DIR/var/lib
VAR_LOG=$CLUSTER_DIR/var/log
RUN_DIR=$CLUSTER_DIR/run
CONF=$CLUSTER_DIR/conf
PKI=$CLUSTER_DIR/pki
LOGS=$CLUSTER_DIR/logs
PIDS=$CLUSTER_DIR/pids
KUBECONFIG_ADMIN=$CLUSTER_DIR/kubeconfig
CONTAINERD_SOCK=$RUN_DIR/containerd/containerd.sock
ENV_FILE=$CLUSTER_DIR/cluster.env

# The cgroup v1 hierarchies (and the v2 one, in hybrid mode) the cluster's processes go into:
# /$CLUSTER_NAME/system for the components, /$CLUSTER_NAME/kubepods for the pods (the
# kubelet's cgroupRoot), so that every process the cluster made can be found and killed.
cgroup_hierarchies() {
  local d
  for d in /sys/fs/cgroup/*/; do
    d=${d%/}
    [[ -f "$d/cgroup.procs" ]] && echo "$d"
  done
}

# in_node CMD...: runs CMD in the node's network and mount namespaces.
in_node() {
  nsenter --net="$NETNS_PATH" --mount="$MNTNS" -- "$@"
}

log() { echo "cluster[$CLUSTER_NAME]: $*" >&2; }

# spawn NAME CMD...: starts CMD in the node's namespaces and the cluster's system cgroup, in a
# session of its own (it outlives this script and the terminal), logging to LOGS/NAME.log
# (appended: a component a test starts again keeps the log of its first run); its pid in PIDS/NAME.
spawn() {
  local name=$1
  shift
  (
    for h in $(cgroup_hierarchies); do
      echo "$BASHPID" >"$h/$CLUSTER_NAME/system/cgroup.procs"
    done
    exec nsenter --net="$NETNS_PATH" --mount="$MNTNS" -- setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null
  ) &
  echo $! >"$PIDS/$name"
}
