#!/usr/bin/env bash
# Gives csi-driver-host-path's data directory (/var/lib/csi-hostpath-data on the node) a small
# file system of its own, so that a volume can fill: the driver keeps every file system volume as
# a directory there, so without it the kubelet reports the node's big disk for each of them and
# dd fills nothing. The file system is an XFS in an image file of CLUSTER_DIR on a loop device,
# mounted over the directory in the node's mount namespace (the driver's contents copied into
# it); the driver's pod is then restarted, because its hostPath mount (private propagation) sees
# only what was mounted before it started. XFS, not ext4: ext4's online resize needs
# CAP_SYS_RESOURCE, which some machines withhold even from root.
#
# Every volume of the driver shares this one file system, and a resize changes the PVC and PV
# but not the file system (the driver's volumes are directories). --grow does what a block
# driver's NodeExpandVolume does once the controller grew the device: the image file, the loop
# device (losetup -c) and the mounted XFS (xfs_growfs).
#
# Usage (make cluster-hostpath-small-fs SIZE_MI=... | GROW_MI=... | REMOVE=1):
#   hack/cluster/hostpath-small-fs.sh SIZE_MI       make and mount a SIZE_MI MiB XFS (at least 300)
#   hack/cluster/hostpath-small-fs.sh --grow MI     grow it to MI MiB
#   hack/cluster/hostpath-small-fs.sh --remove      copy the contents back, unmount, detach
# CLUSTER_NAME/CLUSTER_DIR as for up.sh. make cluster-down removes everything this makes too.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"

DATA_DIR=/var/lib/csi-hostpath-data
IMAGE=$CLUSTER_DIR/hostpath-data.img
SAVE=$CLUSTER_DIR/hostpath-data.save
DRIVER_POD=csi-hostpathplugin-0

die() { echo "hostpath-small-fs: $*" >&2; exit 1; }
usage() { die "usage: $0 SIZE_MI | --grow MI | --remove"; }

[[ -f "$ENV_FILE" ]] || die "no cluster $CLUSTER_NAME running (make cluster)"
# shellcheck disable=SC1090
source "$ENV_FILE"
export KUBECONFIG
kubectl() { "$KUBECTL" "$@"; }

mounted() { in_node mountpoint -q "$DATA_DIR"; }
# The loop device of the image, empty if none.
loop_dev() { losetup -n -O NAME -j "$IMAGE" 2>/dev/null | head -1; }
mebibytes() { [[ "$1" =~ ^[1-9][0-9]*$ ]] || die "$2 must be a whole number of MiB, got \"$1\""; }

# restart_driver deletes the driver's pod and waits for the StatefulSet's new one (a new uid)
# to be Ready: only a container started after the mount sees it.
restart_driver() {
  local old now deadline=$((SECONDS + 180))
  old=$(kubectl get pod "$DRIVER_POD" -o jsonpath='{.metadata.uid}')
  log "restarting $DRIVER_POD so that it mounts $DATA_DIR as it is now"
  kubectl delete pod "$DRIVER_POD" --wait=true --timeout=90s >/dev/null
  while :; do
    now=$(kubectl get pod "$DRIVER_POD" -o jsonpath='{.metadata.uid} {.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
    [[ "$now" != "$old "* && "$now" == *" True" ]] && break
    ((SECONDS < deadline)) || die "$DRIVER_POD not Ready again within 180s (kubectl describe pod $DRIVER_POD)"
    sleep 1
  done
}

create() {
  local size=$1 dev
  mebibytes "$size" SIZE_MI
  # mkfs.xfs (xfsprogs 5.19 and later) refuses file systems under 300 MB.
  ((size >= 300)) || die "SIZE_MI=$size: give at least 300 (mkfs.xfs refuses file systems under 300MB)"
  kubectl get pod "$DRIVER_POD" >/dev/null 2>&1 || die "no pod $DRIVER_POD: run make cluster-deploy-hostpath first"
  mounted && die "$DATA_DIR already has a file system of its own: grow it (GROW_MI=...) or remove it (REMOVE=1) first"
  [[ -z "$(loop_dev)" ]] || die "$IMAGE is still on $(loop_dev) but not mounted: losetup -d $(loop_dev)"

  rm -f "$IMAGE"
  truncate -s "${size}M" "$IMAGE"
  mkfs.xfs -q -f "$IMAGE"
  dev=$(losetup -f --show "$IMAGE")
  # The driver's state (its volumes' directories, state.json) goes along, through a mount of the
  # new file system beside the directory, which is then mounted over the directory.
  # shellcheck disable=SC2016 # expanded by the node's sh
  if ! in_node sh -ec 'tmp=$(mktemp -d); mount "$1" "$tmp"; cp -a "$2/." "$tmp/"; umount "$tmp"; rmdir "$tmp"; mount "$1" "$2"' \
    sh "$dev" "$DATA_DIR"; then
    losetup -d "$dev" || true
    rm -f "$IMAGE"
    die "could not mount $dev on $DATA_DIR in the node"
  fi
  log "$DATA_DIR: XFS of ${size}Mi on $dev ($IMAGE)"
  restart_driver
  in_node df -h "$DATA_DIR"
}

grow() {
  local size=$1 dev now
  mebibytes "$size" GROW_MI
  mounted || die "$DATA_DIR has no file system of its own: make one first (SIZE_MI=...)"
  dev=$(loop_dev)
  [[ -n "$dev" ]] || die "$DATA_DIR is mounted but $IMAGE is on no loop device"
  now=$(($(stat -c %s "$IMAGE") >> 20))
  ((size > now)) || die "GROW_MI=$size: the file system is ${now}Mi already; a file system only grows"
  truncate -s "${size}M" "$IMAGE"
  losetup -c "$dev"
  in_node xfs_growfs "$DATA_DIR" >/dev/null
  log "$DATA_DIR: XFS grown from ${now}Mi to ${size}Mi"
  in_node df -h "$DATA_DIR"
}

remove() {
  local dev
  dev=$(loop_dev)
  if ! mounted; then
    [[ -n "$dev" ]] && losetup -d "$dev"
    rm -f "$IMAGE"
    log "$DATA_DIR has no file system of its own: nothing to remove"
    return
  fi
  # The driver's state goes back onto the node's directory, as it is now.
  rm -rf "$SAVE"
  mkdir -p "$SAVE"
  in_node cp -a "$DATA_DIR/." "$SAVE/"
  in_node umount "$DATA_DIR"
  [[ -n "$dev" ]] && losetup -d "$dev"
  in_node find "$DATA_DIR" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  in_node cp -a "$SAVE/." "$DATA_DIR/"
  rm -rf "$SAVE" "$IMAGE"
  log "$DATA_DIR: back on the node's file system"
  if kubectl get pod "$DRIVER_POD" >/dev/null 2>&1; then
    restart_driver
  fi
}

case "${1:-}" in
--grow) [[ $# -eq 2 ]] || usage; grow "$2" ;;
--remove) [[ $# -eq 1 ]] || usage; remove ;;
-* | "") usage ;;
*) [[ $# -eq 1 ]] || usage; create "$1" ;;
esac
