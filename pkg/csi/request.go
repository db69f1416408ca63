package csi

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/migration"
)

// NewExpandRequest builds the ControllerExpandVolume request for a PV: volume handle,
// capability and the controller-expand secret, read at call time so a rotated secret is used
// at once. A migrated in-tree PV is translated first, and these are those of its CSI view
// (docs/design.md §2.8).
func NewExpandRequest(ctx context.Context, secrets typedcorev1.SecretsGetter, pv *v1.PersistentVolume, driver Driver, requiredBytes int64) (ExpandRequest, error) {
	pv, migrated, err := migration.CSIView(klog.FromContext(ctx), pv)
	if err != nil {
		return ExpandRequest{}, err
	}
	capability, err := VolumeCapability(pv, driver.SingleNodeMultiWriter)
	if err != nil {
		return ExpandRequest{}, err
	}
	req := ExpandRequest{VolumeID: pv.Spec.CSI.VolumeHandle, RequiredBytes: requiredBytes, Capability: capability, Migrated: migrated}
	ref := pv.Spec.CSI.ControllerExpandSecretRef
	if ref == nil {
		return req, nil
	}
	req.Secrets, err = readSecret(ctx, secrets, ref.Namespace, ref.Name)
	if err != nil {
		return req, fmt.Errorf("reading the controller-expand secret %s/%s of PV %s: %w", ref.Namespace, ref.Name, pv.Name, err)
	}
	return req, nil
}

// readSecret returns the data of a secret as the CSI secrets map.
func readSecret(ctx context.Context, secrets typedcorev1.SecretsGetter, namespace, name string) (map[string]string, error) {
	secret, err := secrets.Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	data := make(map[string]string, len(secret.Data))
	for k, v := range secret.Data {
		data[k] = string(v)
	}
	return data, nil
}
