#!/usr/bin/env bash
# Deploys csi-driver-host-path on the running one-node cluster (hack/cluster/up.sh) the way its
# users do: its own deploy script and kubernetes-1.34 manifests, and the RBAC files of its
# sidecars, all unmodified from HOSTPATH_DEPLOY (../shared/anchors/csi-driver-host-path-deploy).
# Their images are already imported under the manifests' names (hack/cluster/build-images.sh)
# and the manifests pull only if not present, so nothing is pulled.
#
# Before: the VolumeSnapshot CRDs of the same folder (the deployment's VolumeSnapshotClass and
# csi-snapshotter need them). After: a StorageClass csi-hostpath-sc with allowVolumeExpansion
# (the deployment has none; its examples/ folder, not kept here, has the same one), and the
# driver's pods Ready.
#
# Usage: hack/cluster/deploy-hostpath.sh     (CLUSTER_NAME/CLUSTER_DIR as for up.sh)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
HOSTPATH_DEPLOY=${HOSTPATH_DEPLOY:-$root/../shared/anchors/csi-driver-host-path-deploy}

[[ -f "$ENV_FILE" ]] || { echo "deploy-hostpath: no cluster $CLUSTER_NAME running (make cluster)" >&2; exit 1; }
# shellcheck disable=SC1090
source "$ENV_FILE"
export KUBECONFIG
[[ -d "$HOSTPATH_DEPLOY/deploy/kubernetes-1.34" ]] ||
  { echo "deploy-hostpath: no $HOSTPATH_DEPLOY/deploy/kubernetes-1.34 (set HOSTPATH_DEPLOY)" >&2; exit 1; }

# The deploy script calls `kubectl` from PATH; it also diffs each local RBAC file against the
# upstream one it would have downloaded with wget. This machine reaches no web site: a wget
# that says so, instead of a connection attempt, keeps that diff empty and the log readable.
shims=$(mktemp -d)
trap 'rm -rf "$shims"' EXIT
ln -s "$KUBECTL" "$shims/kubectl"
printf '#!/bin/sh\necho "wget: offline (hack/cluster/deploy-hostpath.sh): $*" >&2\nexit 1\n' >"$shims/wget"
chmod +x "$shims/wget"
export PATH="$shims:$PATH"

log "VolumeSnapshot CRDs"
kubectl apply -f "$HOSTPATH_DEPLOY/snapshot-crds/" >/dev/null
kubectl wait --for=condition=Established --timeout=60s \
  crd/volumesnapshotclasses.snapshot.storage.k8s.io crd/volumesnapshotcontents.snapshot.storage.k8s.io \
  crd/volumesnapshots.snapshot.storage.k8s.io >/dev/null

# deploy/kubernetes-1.34/deploy.sh is a symbolic link to ../util/deploy-hostpath.sh in the
# driver's repository (stored here as a file holding that path); the script finds the
# manifests next to the name it was started under. The same layout, with links:
layout=$shims/kubernetes-1.34
mkdir -p "$layout"
ln -s "$HOSTPATH_DEPLOY/deploy/util/deploy-hostpath.sh" "$layout/deploy.sh"
ln -s "$HOSTPATH_DEPLOY/deploy/kubernetes-1.34/hostpath" "$layout/hostpath"

log "csi-driver-host-path: deploy/kubernetes-1.34/deploy.sh with the local RBAC files"
rbac=$HOSTPATH_DEPLOY/rbac
CSI_PROVISIONER_RBAC=$rbac/external-provisioner.yaml \
  CSI_ATTACHER_RBAC=$rbac/external-attacher.yaml \
  CSI_RESIZER_RBAC=$rbac/external-resizer.yaml \
  CSI_SNAPSHOTTER_RBAC=$rbac/external-snapshotter.yaml \
  CSI_EXTERNALHEALTH_MONITOR_RBAC=$rbac/external-health-monitor-controller.yaml \
  bash "$layout/deploy.sh" 2>&1 | grep -v '^wget: offline' >&2

log "StorageClass csi-hostpath-sc"
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: csi-hostpath-sc
provisioner: hostpath.csi.k8s.io
reclaimPolicy: Delete
volumeBindingMode: Immediate
allowVolumeExpansion: true
EOF
kubectl rollout status statefulset/csi-hostpathplugin --timeout=120s >&2
log "csi-driver-host-path is running"
kubectl get pods -l app.kubernetes.io/instance=hostpath.csi.k8s.io -o wide >&2
