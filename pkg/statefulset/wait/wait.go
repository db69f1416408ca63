// Package wait implements `statefulset-resizer wait`: block until the volume
// claim templates of a StatefulSet are reconciled for its current
// generation, the way `kubectl rollout status` blocks on a rollout, so a
// CI/CD job can wait for a volume resize. It reads only the StatefulSet and
// its status annotation (the reliable feedback; events are best effort).
package wait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	apiwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

// Outcome is the result of waiting; its value is the process exit code.
type Outcome int

const (
	// Finished: every template is finished for the current generation.
	Finished Outcome = 0
	// Infeasible: a replica cannot reach the template size without a user
	// action (driver said infeasible, patch rejected, cannot shrink, ...).
	Infeasible Outcome = 1
	// TimedOut: neither happened before the timeout.
	TimedOut Outcome = 2
	// Failed: the wait itself could not be done (bad input, no access).
	// Not a verdict on the StatefulSet.
	Failed Outcome = 3
)

// Verdict is what is known about a StatefulSet's volume resize.
type Verdict struct {
	// Done is true when Outcome is final (Finished or Infeasible).
	Done    bool
	Outcome Outcome
	// Message says why, naming PVCs and driver messages when infeasible.
	Message string
	// Recreating is true when the volumes are done and statefulset-resizer
	// is to re-create the StatefulSet: a StatefulSet found missing next is
	// most likely between the re-create's delete and create.
	Recreating bool
}

// Evaluate judges one observation of a StatefulSet. Sizes recorded by the
// webhook in the desired-templates annotation count: the status must have
// been written for that annotation's value, and when the controller will
// re-create the StatefulSet with them (status "recreate"), the wait lasts
// until the re-created object (new uid, no annotation) is finished.
func Evaluate(sts *appsv1.StatefulSet) Verdict {
	progress := func(format string, args ...any) Verdict {
		return Verdict{Message: fmt.Sprintf(format, args...)}
	}
	if len(sts.Spec.VolumeClaimTemplates) == 0 {
		// Nothing to resize, whatever an annotation (perhaps copied from another object) says.
		return Verdict{Done: true, Outcome: Finished, Message: "the StatefulSet has no volume claim templates"}
	}
	wanted, hasDesire := sts.Annotations[desired.Annotation]
	if _, _, err := desired.FromStatefulSet(sts); err != nil {
		// statefulset-resizer ignores it (and says so in an event): the
		// sizes asked for are never reached without a user action.
		return Verdict{Done: true, Outcome: Infeasible, Message: err.Error()}
	}
	st, err := status.FromStatefulSet(sts)
	switch {
	case errors.Is(err, status.ErrOtherObject):
		// A re-created StatefulSet carrying its predecessor's annotation: nothing is known
		// about this object until statefulset-resizer rewrites it.
		return progress("no status for this StatefulSet yet: %v (the StatefulSet was re-created; waiting for statefulset-resizer to evaluate the new object)", err)
	case err != nil:
		return progress("status annotation cannot be read yet: %v", err)
	case st == nil:
		return progress("no %s annotation yet (is statefulset-resizer running?)", status.Annotation)
	case st.RecreateStep != nil && (st.RecreateStep.Step == status.StepDeleting || st.RecreateStep.Step == status.StepRefused):
		// The old object's last document (its delete raised the generation),
		// or a refusal that waits for a change or a retry: the step says more.
		return progress("re-create step %s since %s: %s", st.RecreateStep.Step, st.RecreateStep.Since, st.RecreateStep.Message)
	case st.ObservedGeneration != sts.Generation:
		return progress("status is for generation %d, the StatefulSet is at generation %d", st.ObservedGeneration, sts.Generation)
	case st.Desired != wanted:
		// A webhook-applied size change touches only the annotation, not
		// the generation: the document must be for the current desire.
		return progress("status is for other desired sizes than the StatefulSet's %s annotation (statefulset-resizer has not seen the change yet)", desired.Annotation)
	}

	infeasible, pending := templateStates(sts, st)
	switch {
	case len(infeasible) > 0:
		return Verdict{Done: true, Outcome: Infeasible, Message: strings.Join(infeasible, "; ")}
	case len(pending) > 0:
		return progress("%s", strings.Join(pending, "; "))
	case hasDesire && st.Recreate:
		why := "a partitioned or OnDelete rollout holds it back until it is complete: see the StatefulSet's RecreateWaiting event"
		if st.RecreateStep != nil && st.RecreateStep.Step == status.StepHeldBack {
			why = st.RecreateStep.Message + ", since " + st.RecreateStep.Since
		}
		v := progress("waiting for statefulset-resizer to re-create the StatefulSet with the desired templates (%s)", why)
		v.Recreating = true
		return v
	}
	msg := fmt.Sprintf("%d volume claim template(s) finished for generation %d", len(sts.Spec.VolumeClaimTemplates), sts.Generation)
	if notes := templateNotes(sts, st); len(notes) > 0 {
		// E.g. a request left above the template, or a class that cannot be
		// unset: done, but worth a line in the CI log.
		msg += "; notes: " + strings.Join(notes, "; ")
	}
	return Verdict{Done: true, Outcome: Finished, Message: msg}
}

// templateNotes lists the messages of finished templates (the notes of docs/design.md §3.5).
func templateNotes(sts *appsv1.StatefulSet, st *status.VolumeClaimTemplates) []string {
	var notes []string
	for i := range sts.Spec.VolumeClaimTemplates {
		if ts := st.Template(sts.Spec.VolumeClaimTemplates[i].Name); ts != nil && ts.Message != "" {
			notes = append(notes, fmt.Sprintf("template %s: %s", ts.TemplateName, ts.Message))
		}
	}
	return notes
}

// templateStates lists the templates that are infeasible and those still pending, per the
// status st.
func templateStates(sts *appsv1.StatefulSet, st *status.VolumeClaimTemplates) (infeasible, pending []string) {
	for i := range sts.Spec.VolumeClaimTemplates {
		name := sts.Spec.VolumeClaimTemplates[i].Name
		ts := st.Template(name)
		switch {
		case ts == nil:
			pending = append(pending, fmt.Sprintf("template %s: no status yet", name))
		case ts.InfeasibleReplicas > 0:
			infeasible = append(infeasible, fmt.Sprintf("template %s: %d infeasible replica(s): %s", name, ts.InfeasibleReplicas, ts.Message))
		case ts.FinishedReconciliationGeneration != sts.Generation:
			progress := fmt.Sprintf("template %s: %d of %d replicas ready", name, ts.ReadyReplicas, replicas(sts))
			if ts.Message != "" {
				// E.g. a resize that csi-resizer keeps retrying: not a verdict,
				// but what a timeout in a CI log should show.
				progress += ": " + ts.Message
			}
			pending = append(pending, progress)
		}
	}
	return infeasible, pending
}

func replicas(sts *appsv1.StatefulSet) int32 {
	if sts.Spec.Replicas == nil {
		return 1
	}
	return *sts.Spec.Replicas
}

// Getter reads a StatefulSet; the small seam between waiting and the API.
type Getter interface {
	GetStatefulSet(ctx context.Context, namespace, name string) (*appsv1.StatefulSet, error)
}

// ClientGetter reads StatefulSets with a clientset.
type ClientGetter struct {
	Client kubernetes.Interface
}

// GetStatefulSet implements Getter.
func (g ClientGetter) GetStatefulSet(ctx context.Context, namespace, name string) (*appsv1.StatefulSet, error) {
	return g.Client.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Options tunes Wait.
type Options struct {
	// Timeout bounds the whole wait; it must be positive.
	Timeout time.Duration
	// Interval between polls; default 2s.
	Interval time.Duration
	// Progress, if set, is called with each new progress message.
	Progress func(message string)
}

// Wait polls the StatefulSet until Evaluate says Done or the timeout
// passes. It returns a Failed verdict for errors a retry cannot fix (no
// permission) or when ctx is cancelled; a StatefulSet that does not exist
// (yet: it may be in the middle of delete --cascade=orphan and re-create) is
// waited for.
func Wait(ctx context.Context, getter Getter, namespace, name string, opts Options) Verdict {
	if opts.Interval <= 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.Timeout <= 0 {
		return Verdict{Done: true, Outcome: Failed, Message: fmt.Sprintf("timeout must be positive, got %s", opts.Timeout)}
	}
	w := &waiter{getter: getter, namespace: namespace, name: name, progress: opts.Progress,
		last: Verdict{Message: "not observed yet"}}
	err := apiwait.PollUntilContextTimeout(ctx, opts.Interval, opts.Timeout, true, w.poll)
	switch {
	case w.fatal != nil:
		return Verdict{Done: true, Outcome: Failed, Message: fmt.Sprintf("reading StatefulSet %s/%s: %v", namespace, name, w.fatal)}
	case err == nil:
		return w.last
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		return Verdict{Done: true, Outcome: Failed, Message: fmt.Sprintf("interrupted: %v (last state: %s)", context.Cause(ctx), w.last.Message)}
	case apiwait.Interrupted(err):
		return Verdict{Done: true, Outcome: TimedOut, Message: fmt.Sprintf("timed out after %s: %s", opts.Timeout, w.last.Message)}
	}
	return Verdict{Done: true, Outcome: Failed, Message: err.Error()}
}

// waiter is the state of one Wait between polls.
type waiter struct {
	getter          Getter
	namespace, name string
	progress        func(message string)

	// last is the last observation of the StatefulSet; a failed read does
	// not replace it (near the deadline the client's own rate limiter fails
	// reads, which says nothing about the resize), unless nothing was
	// observed at all.
	last     Verdict
	observed bool
	// reported is the last progress message, told once.
	reported string
	// fatal is an error a retry cannot fix; it ends the wait.
	fatal error
}

func (w *waiter) report(message string) {
	if message != w.reported && w.progress != nil {
		w.progress(message)
	}
	w.reported = message
}

// poll reads the StatefulSet once; it is the condition of the poll loop.
func (w *waiter) poll(ctx context.Context) (bool, error) {
	sts, err := w.getter.GetStatefulSet(ctx, w.namespace, w.name)
	var v Verdict
	switch {
	case apierrors.IsNotFound(err):
		v = Verdict{Message: fmt.Sprintf("StatefulSet %s/%s not found", w.namespace, w.name), Recreating: w.last.Recreating}
		if v.Recreating {
			// Between the re-create's orphan delete and its create: the
			// pods and PVCs stay, and the object comes back.
			v.Message += " (statefulset-resizer is re-creating it)"
		}
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		w.fatal = err
		return true, nil
	case err != nil:
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		message := fmt.Sprintf("reading StatefulSet %s/%s: %v", w.namespace, w.name, err)
		w.report(message)
		if !w.observed {
			w.last = Verdict{Message: message}
		}
		return false, nil
	default:
		v = Evaluate(sts)
		w.observed = true
	}
	if !v.Done {
		w.report(v.Message)
	}
	w.last = v
	return v.Done, nil
}

// ParseTarget parses the NAMESPACE/NAME argument.
func ParseTarget(arg string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(arg, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("want NAMESPACE/NAME, got %q", arg)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", "", fmt.Errorf("invalid namespace %q: %s", namespace, strings.Join(errs, ", "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("invalid StatefulSet name %q: %s", name, strings.Join(errs, ", "))
	}
	return namespace, name, nil
}
