package csi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

// PV annotations naming the controller-modify secret. external-provisioner sets them from the
// StorageClass parameters csi.storage.k8s.io/controller-modify-secret-name and -namespace;
// without them the controller-expand secret is used, as upstream does.
const (
	AnnModifySecretName      = "volume.kubernetes.io/controller-modify-secret-name"
	AnnModifySecretNamespace = "volume.kubernetes.io/controller-modify-secret-namespace"
)

// Keys that --extra-modify-metadata adds to the mutable parameters (the same keys
// external-provisioner adds to CreateVolume parameters with --extra-create-metadata).
const (
	ParamPVCName      = "csi.storage.k8s.io/pvc/name"
	ParamPVCNamespace = "csi.storage.k8s.io/pvc/namespace"
	ParamPVName       = "csi.storage.k8s.io/pv/name"
)

// ModifyRequest is one ControllerModifyVolume call.
type ModifyRequest struct {
	VolumeID string
	// MutableParameters are the VolumeAttributesClass parameters (plus the extra metadata);
	// a map of the request's own, never the class's.
	MutableParameters map[string]string
	// Secrets are the controller-modify secrets. Never logged: csi-lib-utils' gRPC logging
	// strips fields marked csi_secret.
	Secrets map[string]string
	// Migrated: the volume is an in-tree PV translated to CSI (see ExpandRequest.Migrated).
	Migrated bool
}

// Modifier is the boundary the modify controller talks to; tests replace it.
type Modifier interface {
	Modify(ctx context.Context, req ModifyRequest) error
}

// Modify calls ControllerModifyVolume once. The error keeps the driver's gRPC status, which
// the caller classifies.
func (c *Client) Modify(ctx context.Context, req ModifyRequest) error {
	ctx, cancel := context.WithTimeout(ctx, c.modifyTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, connection.AdditionalInfoKey, connection.AdditionalInfo{Migrated: strconv.FormatBool(req.Migrated)})
	_, err := csi.NewControllerClient(c.conn).ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{
		VolumeId:          req.VolumeID,
		Secrets:           req.Secrets,
		MutableParameters: req.MutableParameters,
	})
	return err
}

// NewModifyRequest builds the ControllerModifyVolume request that applies class to pv (bound
// to pvc): the volume handle, a copy of the class parameters (the class is a shared informer
// object), with extraMetadata the PVC and PV names, and the controller-modify secret, read at
// call time so a rotated secret is used at once. A migrated in-tree PV is translated first and
// the handle is that of its CSI view.
func NewModifyRequest(ctx context.Context, secrets typedcorev1.SecretsGetter, pv *v1.PersistentVolume, pvc *v1.PersistentVolumeClaim, class *storagev1.VolumeAttributesClass, extraMetadata bool) (ModifyRequest, error) {
	if class == nil {
		return ModifyRequest{}, errors.New("NewModifyRequest: no VolumeAttributesClass")
	}
	view, migrated, err := migration.CSIView(klog.FromContext(ctx), pv)
	if err != nil {
		return ModifyRequest{}, err
	}
	if view.Spec.CSI.VolumeHandle == "" {
		return ModifyRequest{}, fmt.Errorf("PV %s has no spec.csi.volumeHandle: it cannot be modified", pv.Name)
	}
	req := ModifyRequest{VolumeID: view.Spec.CSI.VolumeHandle, Migrated: migrated}
	req.MutableParameters = maps.Clone(class.Parameters)
	if extraMetadata {
		if req.MutableParameters == nil {
			req.MutableParameters = make(map[string]string, 3)
		}
		req.MutableParameters[ParamPVCName] = pvc.Name
		req.MutableParameters[ParamPVCNamespace] = pvc.Namespace
		req.MutableParameters[ParamPVName] = pv.Name
	}
	req.Secrets, err = modifySecrets(ctx, secrets, pv, view.Spec.CSI.ControllerExpandSecretRef)
	return req, err
}

// modifySecrets reads the secret the PV's modify annotations name; without both of them, the
// controller-expand secret (expandRef, of the CSI view), as upstream does; without either, none.
func modifySecrets(ctx context.Context, secrets typedcorev1.SecretsGetter, pv *v1.PersistentVolume, expandRef *v1.SecretReference) (map[string]string, error) {
	name, namespace := pv.Annotations[AnnModifySecretName], pv.Annotations[AnnModifySecretNamespace]
	source := fmt.Sprintf("annotations %s and %s", AnnModifySecretName, AnnModifySecretNamespace)
	if name == "" || namespace == "" {
		if expandRef == nil {
			return nil, nil
		}
		name, namespace, source = expandRef.Name, expandRef.Namespace, "spec.csi.controllerExpandSecretRef"
	}
	data, err := readSecret(ctx, secrets, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading the controller-modify secret %s/%s of PV %s (named by its %s): %w", namespace, name, pv.Name, source, err)
	}
	return data, nil
}
