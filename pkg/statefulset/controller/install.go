package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"
)

// otherInstall is invariant I6's start-up half (docs/design.md §3.7): one
// statefulset-resizer install per cluster acts on StatefulSets. Another
// install is seen by its leader-election Lease (named Name, as every
// install's) in another namespace than this install's, renewed within its
// lease duration; it is named in the error, and this one does not start.
// (Each StatefulSet's re-create is also guarded by the annotation
// recreate.RecordAnnotation: a second install that started anyway, say
// without leader election, never takes another's re-create.) A cluster that
// does not let this install list Leases is only logged: the guard on each
// StatefulSet still holds.
func (c *Controller) otherInstall(ctx context.Context) error {
	leases, err := c.client.CoordinationV1().Leases(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", Name).String(),
	})
	if apierrors.IsForbidden(err) {
		klog.FromContext(ctx).Info("Cannot list the Leases of other statefulset-resizer installs (RBAC: list leases); relying on the per-StatefulSet guard", "err", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the Leases %q of statefulset-resizer installs: %w", Name, err)
	}
	now := c.clock.Now()
	for _, l := range leases.Items {
		s := l.Spec
		if l.Name != Name || l.Namespace == c.recordNamespace || s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			continue
		}
		if expiry := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second); now.Before(expiry) {
			return fmt.Errorf("another statefulset-resizer install runs in namespace %s (Lease %s/%s held by %s, renewed %s): "+
				"one install per cluster may act on StatefulSets; remove one of them (this one is in namespace %s)",
				l.Namespace, l.Namespace, l.Name, *s.HolderIdentity, s.RenewTime.UTC().Format(time.RFC3339), c.recordNamespace)
		}
	}
	return nil
}
