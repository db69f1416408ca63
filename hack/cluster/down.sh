#!/usr/bin/env bash
# Stops the one-node cluster CLUSTER_NAME (hack/cluster/lib.sh) and removes everything it made:
# its processes (control plane, containerd, kubelet, and every container: all are in its
# cgroups or its namespaces), its loop devices, its mounts (those of the kubelet and containerd
# live in its own mount namespace and end with it), its network namespace (and with it the
# veth pair, the pods' bridge and every iptables rule of the node), its cgroups and
# CLUSTER_DIR. Safe to run when nothing or only part of a cluster exists (a failed start).
#
# Usage: hack/cluster/down.sh [--keep-dir]   (--keep-dir keeps CLUSTER_DIR's logs for a look)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

keep_dir=false
[[ "${1:-}" == "--keep-dir" ]] && keep_dir=true

# The pids of every process of the cluster: in its cgroups, its network namespace or its mount
# namespace. Never this script nor its parents.
cluster_pids() {
  {
    local h
    for h in $(cgroup_hierarchies); do
      [[ -d "$h/$CLUSTER_NAME" ]] && find "$h/$CLUSTER_NAME" -name cgroup.procs -exec cat {} + 2>/dev/null
    done
    [[ -e "$NETNS_PATH" ]] && ip netns pids "$NETNS" 2>/dev/null
    if mountpoint -q "$MNTNS" 2>/dev/null; then
      local ino p
      ino=$(stat -L -c %i "$MNTNS")
      for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/ns/mnt" 2>/dev/null)" == "mnt:[$ino]" ]] && echo "${p#/proc/}"
      done
    fi
  } | sort -un | grep -vx -e "$$" -e "$PPID" || true
}

freezer=/sys/fs/cgroup/freezer/$CLUSTER_NAME
set_freezer() {
  if [[ -f "$freezer/freezer.state" ]]; then
    echo "$1" >"$freezer/freezer.state" 2>/dev/null || true
  fi
}

pids=$(cluster_pids)
if [[ -n "$pids" ]]; then
  log "stopping $(wc -w <<<"$pids") processes"
  # Frozen first, so that neither the kubelet nor containerd restarts what is being killed;
  # SIGKILL takes effect on frozen tasks once they are thawed.
  set_freezer FROZEN
  for _ in $(seq 50); do
    [[ ! -f "$freezer/freezer.state" || "$(cat "$freezer/freezer.state")" == FROZEN ]] && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
  set_freezer THAWED
  for i in $(seq 100); do
    pids=$(cluster_pids)
    [[ -z "$pids" ]] && break
    # Anything that appeared meanwhile (a process forked before the freeze).
    if ((i % 10 == 0)); then
      # shellcheck disable=SC2086
      kill -KILL $pids 2>/dev/null || true
    fi
    sleep 0.1
  done
  if [[ -n "$pids" ]]; then
    log "processes still alive after 10s: $pids"
    ps -o pid,stat,cmd -p "$(tr '\n' ',' <<<"$pids" | sed 's/,$//')" >&2 || true
    exit 1
  fi
fi

# Loop devices whose backing file is the cluster's (block volumes of csi-driver-host-path, the
# data directory's file system of hostpath-small-fs.sh). `losetup -d` of one still mounted in
# the node's mount namespace only marks it: the kernel detaches it when the unmount of the
# namespace file below ends that namespace and with it the mount.
while read -r dev file; do
  if [[ "$file" == "$CLUSTER_DIR"/* ]]; then
    log "detaching $dev ($file)"
    losetup -d "$dev" || true
  fi
done < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null || true)

# Mounts under CLUSTER_DIR in the machine's own mount namespace: only the namespace file and
# its private mount, unless something went wrong; deepest first.
host_mounts() {
  awk -v d="$CLUSTER_DIR" '{ gsub(/\\040/, " ", $5); if ($5 == d || index($5, d "/") == 1) print $5 }' /proc/self/mountinfo | sort -r
}
for m in $(host_mounts); do
  umount "$m" 2>/dev/null || umount -l "$m" || true
done

if [[ -e "$NETNS_PATH" ]]; then
  log "deleting network namespace $NETNS"
  ip netns delete "$NETNS"
fi
# Gone with the namespace, unless its processes outlived it.
if ip link show "$CLUSTER_VETH" >/dev/null 2>&1; then
  ip link delete "$CLUSTER_VETH"
fi

# /run/netns, if this cluster's `ip netns add` made it and no namespace is left in it.
if [[ -z "$(ls -A /run/netns 2>/dev/null)" ]]; then
  if [[ -f "$CLUSTER_DIR/made-run-netns-mount" ]] && mountpoint -q /run/netns; then
    umount /run/netns || true
  fi
  if [[ -f "$CLUSTER_DIR/made-run-netns-dir" ]] && ! mountpoint -q /run/netns; then
    rmdir /run/netns 2>/dev/null || true
  fi
fi

for h in $(cgroup_hierarchies); do
  [[ -d "$h/$CLUSTER_NAME" ]] || continue
  find "$h/$CLUSTER_NAME" -depth -type d -exec rmdir {} + 2>/dev/null || true
  if [[ -d "$h/$CLUSTER_NAME" ]]; then
    log "cgroup $h/$CLUSTER_NAME could not be removed"
    exit 1
  fi
done

if [[ -d "$CLUSTER_DIR" ]]; then
  if [[ -n "$(host_mounts)" ]]; then
    log "mounts left under $CLUSTER_DIR, not removing it:"
    host_mounts >&2
    exit 1
  fi
  if $keep_dir; then
    log "kept $CLUSTER_DIR"
  else
    # --one-file-system: never follow a mount out of the directory.
    rm -rf --one-file-system "$CLUSTER_DIR"
  fi
fi
log "down: no process, mount, network namespace or cgroup of the cluster is left"
