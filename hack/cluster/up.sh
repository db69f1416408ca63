#!/usr/bin/env bash
# Starts a one-node Kubernetes cluster on this machine, in network and mount namespaces of its
# own (docs/cluster.md): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# containerd 2.x with runc and the CNI bridge, the kubelet and kube-proxy, all Kubernetes
# v1.36.3 as the tests use, with every image imported offline (hack/cluster/build-images.sh).
#
# The node's address is $CLUSTER_NET.2 on a veth link whose other end ($CLUSTER_NET.1) is on
# the machine, so the kubeconfig it prints works from the machine as it is. A previous cluster
# of the same CLUSTER_NAME is removed first; a failed start removes what it made.
#
# Usage: hack/cluster/up.sh      (settings: hack/cluster/lib.sh; stop: hack/cluster/down.sh)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

start=$(date +%s)
if [[ $(id -u) -ne 0 ]]; then
  echo "cluster: needs root (network and mount namespaces, cgroups, containers)" >&2
  exit 1
fi
bash "$here/deps.sh"

# Build (or find in the cache) everything before touching the machine.
k8s_bin=$(bash "$root/hack/build-k8s-bins.sh" | tail -1)
node_bin=$(bash "$root/hack/build-node-bins.sh" | tail -1)
containerd_bin=$(bash "$root/hack/build-containerd.sh" | tail -1)
# CLUSTER_IMAGES=minimal: only pause, busybox and the product's image (no csi-driver-host-path).
images_arg=()
[[ "${CLUSTER_IMAGES:-}" == minimal ]] && images_arg=(--minimal)
mapfile -t images < <(bash "$here/build-images.sh" "${images_arg[@]}")
((${#images[@]} > 0)) || { log "no images built"; exit 1; }
log "binaries and images ready after $(($(date +%s) - start))s"

bash "$here/down.sh"

on_failure() {
  local rc=$?
  log "start failed (exit $rc); the last lines of each log:"
  local f
  for f in "$LOGS"/*.log; do
    [[ -f "$f" ]] || continue
    echo "--- $f" >&2
    tail -n 15 "$f" >&2
  done
  if [[ "${CLUSTER_KEEP_ON_FAILURE:-}" == 1 ]]; then
    log "CLUSTER_KEEP_ON_FAILURE=1: left as it is; hack/cluster/down.sh removes it"
  else
    bash "$here/down.sh" || true
  fi
  exit "$rc"
}
trap on_failure ERR

mkdir -p "$CLUSTER_DIR" "$NS_DIR" "$VAR_LIB" "$VAR_LOG" "$RUN_DIR" "$CONF" "$PKI" "$LOGS" "$PIDS"

# --- network namespace: loopback, and a veth link to the machine ----------------------------
log "network namespace $NETNS, node address $NODE_IP"
# `ip netns add` makes /run/netns (and a shared bind mount of it) the first time: remembered, so
# that down.sh removes them again when no namespace is left in them.
[[ -d /run/netns ]] || touch "$CLUSTER_DIR/made-run-netns-dir"
mountpoint -q /run/netns 2>/dev/null || touch "$CLUSTER_DIR/made-run-netns-mount"
ip netns add "$NETNS"
ip link add "$CLUSTER_VETH" type veth peer name eth0 netns "$NETNS"
ip addr add "$HOST_IP/30" dev "$CLUSTER_VETH"
ip link set "$CLUSTER_VETH" up
ip netns exec "$NETNS" ip link set lo up
ip netns exec "$NETNS" ip addr add "$NODE_IP/30" dev eth0
ip netns exec "$NETNS" ip link set eth0 up
# A route for the Services' range, so that the node's own processes can connect to a ClusterIP
# (the apiserver calling an admission webhook through its Service): without one, connect() fails
# with "network is unreachable" before kube-proxy's DNAT (nat OUTPUT) can send it to the pod.
# On-link, no gateway: an address no Service rule takes gets no ARP answer and goes nowhere.
ip netns exec "$NETNS" ip route add "$SERVICE_CIDR" dev eth0
# No default route: nothing inside may reach past the machine. These sysctls are the namespace's
# own: forwarding between the pods' bridge and the node, and iptables on bridged traffic (a pod
# reaching a Service whose endpoint is a pod on the same bridge).
modprobe br_netfilter 2>/dev/null || true
ip netns exec "$NETNS" sysctl -qw net.ipv4.ip_forward=1
ip netns exec "$NETNS" sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null ||
  log "net.bridge.bridge-nf-call-iptables unavailable: pod-to-Service-to-pod on the bridge may not work"

# --- mount namespace -------------------------------------------------------------------------
log "mount namespace $MNTNS"
mount --bind "$NS_DIR" "$NS_DIR"
mount --make-private "$NS_DIR"
touch "$MNTNS"
mkdir -p "$NS_DIR/cgroup" "$CONF/sysctl"
# The kubelet sets kernel.panic, kernel.panic_on_oops, vm.overcommit_memory, vm.panic_on_oom and
# two keyrings limits when they differ from what it wants. Those are the machine's, not a
# namespace's: the node sees files with the kubelet's values instead, so it changes nothing.
declare -A kubelet_sysctls=(
  [kernel/panic]=10 [kernel/panic_on_oops]=1 [vm/overcommit_memory]=1 [vm/panic_on_oom]=0
  [kernel/keys/root_maxkeys]=1000000 [kernel/keys/root_maxbytes]=25000000
)
sysctl_binds=""
for k in "${!kubelet_sysctls[@]}"; do
  f="$CONF/sysctl/${k//\//.}"
  echo "${kubelet_sysctls[$k]}" >"$f"
  sysctl_binds+="mount --bind '$f' '/proc/sys/$k'"$'\n'
done
# In the new namespace, in this order: a sysfs of the node's network namespace (with the
# machine's cgroup mounts moved onto it: they must stay visible), /var/lib, /var/log and /run
# from CLUSTER_DIR (the kubelet, containerd, the CNI plugins and csi-driver-host-path's manifests
# use those paths; the machine's own stay untouched), the sysctl files, and last everything
# shared within the namespace, for the Bidirectional mounts of the CSI driver's pod. Propagation
# starts private (unshare's default): nothing mounted inside reaches the machine.
nsenter --net="$NETNS_PATH" unshare --mount="$MNTNS" --propagation private -- bash -euc "
  mount --rbind /sys/fs/cgroup '$NS_DIR/cgroup'
  mount -t sysfs sysfs /sys
  mount --move '$NS_DIR/cgroup' /sys/fs/cgroup
  mount --bind '$VAR_LIB' /var/lib
  mount --bind '$VAR_LOG' /var/log
  mount --bind '$RUN_DIR' /run
  $sysctl_binds
  mount --make-rshared /
"

# --- cgroups ---------------------------------------------------------------------------------
for h in $(cgroup_hierarchies); do
  mkdir -p "$h/$CLUSTER_NAME/system"
  if [[ -f "$h/cpuset.cpus" ]]; then
    for d in "$h/$CLUSTER_NAME" "$h/$CLUSTER_NAME/system"; do
      cat "$h/cpuset.cpus" >"$d/cpuset.cpus"
      cat "$h/cpuset.mems" >"$d/cpuset.mems"
    done
  fi
done


# wait_for WHAT SECONDS CMD...: polls CMD until it succeeds; fails naming WHAT.
wait_for() {
  local what=$1 secs=$2 i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  log "$what not ready after ${secs}s"
  return 1
}

# --- PKI ---------------------------------------------------------------------------------------
log "certificates"
openssl_quiet() { openssl "$@" 2>/dev/null; }
openssl_quiet req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 30 \
  -subj "/CN=$CLUSTER_NAME-ca" -keyout "$PKI/ca.key" -out "$PKI/ca.crt"
# issue NAME SUBJECT EXT: a key and a certificate signed by the cluster's CA.
issue() {
  local name=$1 subj=$2 ext=$3
  openssl_quiet req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "$subj" \
    -keyout "$PKI/$name.key" -out "$PKI/$name.csr"
  openssl_quiet x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 30 -extfile <(printf '%s\n' "$ext") -out "$PKI/$name.crt"
  rm -f "$PKI/$name.csr"
}
client_ext="keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
issue apiserver "/CN=kube-apiserver" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
issue kubelet-serving "/CN=$NODE_NAME" "keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,DNS:$NODE_NAME"
issue admin "/O=system:masters/CN=$CLUSTER_NAME-admin" "$client_ext"
issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client_ext"
issue controller-manager "/CN=system:kube-controller-manager" "$client_ext"
issue scheduler "/CN=system:kube-scheduler" "$client_ext"
issue kube-proxy "/CN=system:kube-proxy" "$client_ext"
issue kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$client_ext"
openssl_quiet genrsa -out "$PKI/sa.key" 2048
openssl_quiet rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub"
chmod 600 "$PKI"/*.key

# kubeconfig FILE NAME: a kubeconfig for the identity of PKI/NAME.{crt,key}.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: $CLUSTER_NAME
  context:
    cluster: $CLUSTER_NAME
    user: $2
current-context: $CLUSTER_NAME
EOF
  chmod 600 "$1"
}
kubeconfig "$KUBECONFIG_ADMIN" admin
for c in controller-manager scheduler kube-proxy kubelet; do
  kubeconfig "$CONF/$c.kubeconfig" "$c"
done
kubectl=("$k8s_bin/kubectl" --kubeconfig "$KUBECONFIG_ADMIN")

# --- control plane ---------------------------------------------------------------------------
log "etcd"
spawn etcd "$k8s_bin/etcd" --name=node --data-dir=/var/lib/etcd \
  --listen-client-urls=http://127.0.0.1:2379 --advertise-client-urls=http://127.0.0.1:2379 \
  --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
  --initial-cluster=node=http://127.0.0.1:2380 --unsafe-no-fsync=true --log-level=warn
wait_for etcd 60 in_node curl -sf http://127.0.0.1:2379/health

# The audit log records who wrote what (make bench-node counts the resizer's writes per resize
# by its ServiceAccount, the kubelet's by its node identity): write verbs only, at Metadata level
# (no bodies), once each when the response is complete, so that it costs little; reads and
# watches are not logged.
cat >"$CONF/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
EOF

log "kube-apiserver"
spawn kube-apiserver "$k8s_bin/kube-apiserver" \
  --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=0.0.0.0 --advertise-address="$NODE_IP" --secure-port="$APISERVER_PORT" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --allow-privileged=true \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --audit-policy-file="$CONF/audit-policy.yaml" --audit-log-path="$LOGS/audit.log" \
  --audit-log-format=json --audit-log-maxsize=200 --audit-log-maxbackup=1 \
  --profiling=false --shutdown-send-retry-after=true -v=1
wait_for kube-apiserver 120 "${kubectl[@]}" get --raw /readyz

log "kube-controller-manager, kube-scheduler"
spawn kube-controller-manager "$k8s_bin/kube-controller-manager" \
  --kubeconfig="$CONF/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CONF/controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CONF/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-cidr="$CLUSTER_CIDR" --service-cluster-ip-range="$SERVICE_CIDR" \
  --flex-volume-plugin-dir=/var/lib/kubelet/volumeplugins --profiling=false -v=1
spawn kube-scheduler "$node_bin/kube-scheduler" \
  --kubeconfig="$CONF/scheduler.kubeconfig" \
  --authentication-kubeconfig="$CONF/scheduler.kubeconfig" \
  --authorization-kubeconfig="$CONF/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --profiling=false -v=1

# --- containerd --------------------------------------------------------------------------------
snapshotter=overlayfs
if ! in_node bash -c "d=\$(mktemp -d /var/lib/ovl.XXXXXX) && mkdir \$d/{l,u,w,m} &&
    mount -t overlay overlay -o lowerdir=\$d/l,upperdir=\$d/u,workdir=\$d/w \$d/m && umount \$d/m; rc=\$?; rm -rf \$d; exit \$rc"; then
  snapshotter=native
  log "overlayfs does not mount here: containerd uses the native snapshotter"
fi
mkdir -p "$CONF/cni"
cat >"$CONF/cni/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CLUSTER_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "/var/lib/cni/networks"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
cat >"$CONF/containerd.toml" <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "$snapshotter"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "registry.k8s.io/pause:3.10.2"

[plugins."io.containerd.cri.v1.runtime"]
  # Pod network namespaces under containerd's state dir, not the machine's /run/netns.
  netns_mounts_under_state_dir = true
  # This machine withholds CAP_SYS_RESOURCE even from root: no process may lower its
  # oom_score_adj below 0, and runc fails every pod sandbox (-998) with "failed to update
  # /proc/self/oom_score_adj: Permission denied". Clamp to containerd's own score (0) instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$CONF/cni"
EOF
log "containerd ($snapshotter)"
spawn containerd env PATH="$containerd_bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  "$containerd_bin/containerd" --config "$CONF/containerd.toml"
ctr=(in_node "$containerd_bin/ctr" --address /run/containerd/containerd.sock -n k8s.io)
wait_for containerd 60 "${ctr[@]}" version

log "importing ${#images[@]} images"
for img in "${images[@]}"; do
  "${ctr[@]}" images import --snapshotter "$snapshotter" --local "$img" >/dev/null
done

# --- kubelet and kube-proxy --------------------------------------------------------------------
printf 'search cluster.local\noptions ndots:1\n' >"$CONF/resolv.conf"
cat >"$CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The machine has cgroup v1 (hybrid); the kubelet refuses v1 since 1.35 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
# The pods' cgroups under the cluster's own, so that down.sh finds every container.
cgroupRoot: /$CLUSTER_NAME
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: "$PKI/ca.crt" }
authorization:
  mode: Webhook
tlsCertFile: "$PKI/kubelet-serving.crt"
tlsPrivateKeyFile: "$PKI/kubelet-serving.key"
readOnlyPort: 0
failSwapOn: false
clusterDomain: cluster.local
# No DNS server in this cluster; pods get a resolv.conf that sends nothing off the machine.
resolvConf: "$CONF/resolv.conf"
podCIDR: "$POD_CIDR"
# The images cannot be pulled again: never collect them, and evict only when really full.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
protectKernelDefaults: false
# A pod's volumes are looked at again (and an online expansion's node step done) at each sync:
# every 10s instead of the default 1m, so that a resize's node step takes seconds, not a minute.
syncFrequency: 10s
# Volume usage in /stats/summary is computed every volumeStatsAggPeriod (default 1m): every 10s,
# so that volume-autoscaler (TestVolumeAutoscaler) sees a dd's writes and a grown file system in
# seconds, not a minute. statfs per mounted volume; emptyDirs are walked by du (few here).
volumeStatsAggPeriod: 10s
# Its own score: the default -999 needs CAP_SYS_RESOURCE, which this machine withholds.
oomScoreAdj: 0
EOF
log "kubelet"
spawn kubelet "$node_bin/kubelet" --config="$CONF/kubelet.yaml" --kubeconfig="$CONF/kubelet.kubeconfig" \
  --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" -v=2

cat >"$CONF/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: "$CONF/kube-proxy.kubeconfig"
mode: iptables
clusterCIDR: "$CLUSTER_CIDR"
hostnameOverride: "$NODE_NAME"
# The default -999 needs CAP_SYS_RESOURCE, which this machine withholds.
oomScoreAdj: 0
healthzBindAddress: "127.0.0.1:10256"
metricsBindAddress: "127.0.0.1:10249"
# Leave the conntrack table sizes and timeouts alone: they are the machine's, not the
# namespace's.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
log "kube-proxy"
spawn kube-proxy "$node_bin/kube-proxy" --config="$CONF/kube-proxy.yaml" -v=1

wait_for "node $NODE_NAME Ready" 180 "${kubectl[@]}" wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
# The default ServiceAccount is what pods run as; it appears a moment after the namespace.
wait_for "the default ServiceAccount" 60 "${kubectl[@]}" get serviceaccount default

cat >"$ENV_FILE" <<EOF
CLUSTER_NAME=$CLUSTER_NAME
CLUSTER_DIR=$CLUSTER_DIR
KUBECONFIG=$KUBECONFIG_ADMIN
KUBECTL=$k8s_bin/kubectl
SERVER=https://$NODE_IP:$APISERVER_PORT
CA_FILE=$PKI/ca.crt
ADMIN_CERT=$PKI/admin.crt
ADMIN_KEY=$PKI/admin.key
NODE_NAME=$NODE_NAME
NODE_IP=$NODE_IP
NETNS=$NETNS
CONTAINERD_SOCK=$CONTAINERD_SOCK
CTR=$containerd_bin/ctr
SNAPSHOTTER=$snapshotter
PRODUCT_IMAGE=$(cat "$(dirname "${images[-1]}")/tag")
EOF
trap - ERR
log "up in $(($(date +%s) - start))s"
cat <<EOF

  The one-node cluster $CLUSTER_NAME is running (Kubernetes $("${kubectl[@]}" version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1), node $NODE_NAME at $NODE_IP).

    export KUBECONFIG=$KUBECONFIG_ADMIN
    alias kubectl=$k8s_bin/kubectl
    kubectl get nodes,pods -A

  Images are imported, not pulled: $(grep PRODUCT_IMAGE "$ENV_FILE" | cut -d= -f2) (this checkout), registry.k8s.io/pause:3.10.2,
  localhost/busybox:1.35.0 and csi-driver-host-path's (make cluster-deploy-hostpath deploys it).
  Logs: $LOGS. Inside the node: ip netns exec $NETNS ..., or nsenter --net=$NETNS_PATH --mount=$MNTNS ...
  Stop and remove everything: make cluster-down
EOF
