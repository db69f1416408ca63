package status

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// maxOutcomeConflicts bounds how often WriteOutcome re-reads a PVC that keeps changing under
// it. Past it the answer is left unrecorded and the caller's sync fails: the state the pre-call
// write left (ControllerResizeInProgress at the target) makes the retry repeat the idempotent
// call.
const maxOutcomeConflicts = 3

// WriteOutcome writes the status that records a driver's answer, outcome applied to pvc's
// status, through write, which guards by resourceVersion like every status write: the
// conditions list is written whole, and an unguarded write would drop a condition another
// component set during the call. The answer is known and must not cost a second driver call,
// so on a conflict (the PVC changed during the call: a new request, someone else's condition)
// the PVC is read again through client, not from a cache that may be behind, and outcome is
// applied to what it holds now; reread is told of the version read again, which replaces pvc.
// Only a conflict costs that read.
func WriteOutcome(ctx context.Context, client kubernetes.Interface, pvc *v1.PersistentVolumeClaim,
	outcome func(v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus,
	write func(*v1.PersistentVolumeClaim, v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error),
	reread func(old, latest *v1.PersistentVolumeClaim)) (*v1.PersistentVolumeClaim, error) {
	for conflicts := 0; ; conflicts++ {
		out, err := write(pvc, outcome(pvc.Status))
		if err == nil || !apierrors.IsConflict(err) || conflicts == maxOutcomeConflicts {
			return out, err
		}
		klog.FromContext(ctx).V(2).Info("The PVC changed during the driver call; recording the answer over its latest version", "resourceVersion", pvc.ResourceVersion)
		latest, getErr := client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
		if getErr != nil {
			return nil, errors.Join(err, fmt.Errorf("reading PVC %s/%s again: %w", pvc.Namespace, pvc.Name, getErr))
		}
		if latest.UID != pvc.UID {
			return nil, fmt.Errorf("PVC %s/%s was deleted and re-created during the driver call; its answer is not recorded on the new object", pvc.Namespace, pvc.Name)
		}
		reread(pvc, latest)
		pvc = latest
	}
}
