package wait

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

func sts(generation int64, st *status.VolumeClaimTemplates, templates ...string) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: generation},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)},
	}
	for _, t := range templates {
		s.Spec.VolumeClaimTemplates = append(s.Spec.VolumeClaimTemplates, corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: t}})
	}
	if st != nil {
		value, _ := st.Encode()
		s.Annotations = map[string]string{status.Annotation: value}
	}
	return s
}

func TestEvaluate(t *testing.T) {
	finished := func(name string, gen int64) status.Template {
		return status.Template{TemplateName: name, ReadyReplicas: 3, FinishedReconciliationGeneration: gen}
	}
	cases := []struct {
		name    string
		sts     *appsv1.StatefulSet
		done    bool
		outcome Outcome
		message string
	}{
		{"no status yet", sts(2, nil, "data"), false, Finished, "no csi-resizer.io/volume-claim-templates-status annotation yet"},
		{"no templates at all", sts(2, nil), true, Finished, "no volume claim templates"},
		{"status of an older generation", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 2,
			Templates: []status.Template{finished("data", 2)}}, "data"), false, Finished, "status is for generation 2"},
		{"in progress", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 3,
			Templates: []status.Template{{TemplateName: "data", ReadyReplicas: 1, FinishedReconciliationGeneration: 2}}}, "data"),
			false, Finished, "template data: 1 of 3 replicas ready"},
		{"in progress with a failing resize: not a verdict, but shown", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 3,
			Templates: []status.Template{{TemplateName: "data", ReadyReplicas: 2,
				Message: "data-web-1: resize to 10Gi failing, retried by csi-resizer: Internal: backend busy"}}}, "data"),
			false, Finished, "template data: 2 of 3 replicas ready: data-web-1: resize to 10Gi failing, retried by csi-resizer: Internal: backend busy"},
		{"template missing from status", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 3,
			Templates: []status.Template{finished("data", 3)}}, "data", "logs"), false, Finished, "template logs: no status yet"},
		{"finished", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 3,
			Templates: []status.Template{finished("data", 3), finished("logs", 3)}}, "data", "logs"), true, Finished,
			"2 volume claim template(s) finished for generation 3"},
		{"finished with a note", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 3,
			Templates: []status.Template{func() status.Template {
				f := finished("data", 3)
				f.Message = `data-web-0: the class "gold" cannot be unset`
				return f
			}()}}, "data"), true, Finished,
			`1 volume claim template(s) finished for generation 3; notes: template data: data-web-0: the class "gold" cannot be unset`},
		{"infeasible beats in progress", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 3,
			Templates: []status.Template{{TemplateName: "data", ReadyReplicas: 1}, {TemplateName: "logs", InfeasibleReplicas: 1,
				Message: "logs-web-0: cannot resize to 10Gi: OutOfRange: pool full"}}}, "data", "logs"), true, Infeasible,
			"template logs: 1 infeasible replica(s): logs-web-0: cannot resize to 10Gi: OutOfRange: pool full"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Evaluate(tc.sts)
			if v.Done != tc.done || v.Outcome != tc.outcome || !strings.Contains(v.Message, tc.message) {
				t.Errorf("got %+v, want done=%v outcome=%d message containing %q", v, tc.done, tc.outcome, tc.message)
			}
		})
	}
	// The desired-templates annotation (the webhook's): a status is only
	// for the desire it records; with a re-create coming, finished volumes
	// are not the end; an annotation the controller cannot use is a verdict.
	const want = `[{"name":"data","storage":"2Gi"}]`
	withDesire := func(value string, st *status.VolumeClaimTemplates) *appsv1.StatefulSet {
		s := sts(3, st, "data")
		s.Annotations[desired.Annotation] = value
		return s
	}
	for _, tc := range []struct {
		name    string
		sts     *appsv1.StatefulSet
		done    bool
		outcome Outcome
		message string
	}{
		{"finished status of before the desire", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 3,
			Templates: []status.Template{finished("data", 3)}}), false, Finished, "status is for other desired sizes"},
		{"desire removed, status still for it", sts(3, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: want,
			Templates: []status.Template{finished("data", 3)}}, "data"), false, Finished, "status is for other desired sizes"},
		{"desire finished, re-create to come", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: want, Recreate: true,
			Templates: []status.Template{finished("data", 3)}}), false, Finished, "waiting for statefulset-resizer to re-create"},
		{"desire finished, no re-create (--recreate=false)", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: want,
			Templates: []status.Template{finished("data", 3)}}), true, Finished, "finished for generation 3"},
		{"desire infeasible", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: want, Recreate: true,
			Templates: []status.Template{{TemplateName: "data", InfeasibleReplicas: 1, Message: "data-web-0: OutOfRange: full"}}}),
			true, Infeasible, "data-web-0: OutOfRange: full"},
		{"re-create held back", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: want, Recreate: true,
			RecreateStep: &status.RecreateStep{Step: status.StepHeldBack, Since: "2026-11-29T01:00:00Z", Message: "the re-create waits: partition 1"},
			Templates:    []status.Template{finished("data", 3)}}), false, Finished, "(the re-create waits: partition 1, since 2026-11-29T01:00:00Z)"},
		{"re-create deleting (the delete raised the generation)", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 2, Desired: want,
			RecreateStep: &status.RecreateStep{Step: status.StepDeleting, Since: "2026-11-29T01:00:00Z", Message: "record r stored"},
			Templates:    []status.Template{finished("data", 2)}}), false, Finished, "re-create step Deleting since 2026-11-29T01:00:00Z: record r stored"},
		{"re-create refused", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: want, Recreate: true,
			RecreateStep: &status.RecreateStep{Step: status.StepRefused, Since: "t", Message: "exceeded quota. Nothing was deleted"},
			Templates:    []status.Template{finished("data", 3)}}), false, Finished, "re-create step Refused since t: exceeded quota. Nothing was deleted"},
		{"re-created object finished", withDesire(want, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: want,
			RecreateStep: &status.RecreateStep{Step: status.StepRecreated, Since: "t", Message: "re-created"},
			Templates:    []status.Template{finished("data", 3)}}), true, Finished, "finished for generation 3"},
		{"unusable desire", withDesire(`{`, &status.VolumeClaimTemplates{ObservedGeneration: 3, Desired: `{`,
			Templates: []status.Template{finished("data", 3)}}), true, Infeasible, desired.Annotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Evaluate(tc.sts)
			if v.Done != tc.done || v.Outcome != tc.outcome || !strings.Contains(v.Message, tc.message) {
				t.Errorf("got %+v, want done=%v outcome=%d message containing %q", v, tc.done, tc.outcome, tc.message)
			}
		})
	}
	// The orphan-recreate flow from an exported manifest: the new object
	// (another uid, generation 1 like the old one) carries the old object's
	// "finished at generation 1". That is not this object's resize finishing.
	for name, value := range map[string]string{
		"another object's status":     `{"observedGeneration":1,"uid":"old","templates":[{"templateName":"data","readyReplicas":3,"finishedReconciliationGeneration":1,"infeasibleReplicas":0}]}`,
		"status without uid":          `{"observedGeneration":1,"templates":[{"templateName":"data","readyReplicas":3,"finishedReconciliationGeneration":1,"infeasibleReplicas":0}]}`,
		"another object's infeasible": `{"observedGeneration":1,"uid":"old","templates":[{"templateName":"data","readyReplicas":0,"infeasibleReplicas":1,"message":"m"}]}`,
	} {
		copied := sts(1, nil, "data")
		copied.UID = "new"
		copied.Annotations = map[string]string{status.Annotation: value}
		if v := Evaluate(copied); v.Done || !strings.Contains(v.Message, "another object") {
			t.Errorf("%s: got %+v, want not done, the status being another object's", name, v)
		}
		// Without templates there is nothing to wait for, whatever the annotation.
		copied.Spec.VolumeClaimTemplates = nil
		if v := Evaluate(copied); !v.Done || v.Outcome != Finished {
			t.Errorf("%s, no templates: got %+v, want finished", name, v)
		}
	}
	garbage := sts(1, nil, "data")
	garbage.Annotations = map[string]string{status.Annotation: "{"}
	if v := Evaluate(garbage); v.Done {
		t.Errorf("unreadable annotation: %+v", v)
	}
}

// scripted is a Getter that returns a scripted sequence of answers, then
// repeats the last one.
type scripted struct {
	mu      sync.Mutex
	answers []func() (*appsv1.StatefulSet, error)
	calls   int
}

func (s *scripted) GetStatefulSet(context.Context, string, string) (*appsv1.StatefulSet, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := min(s.calls, len(s.answers)-1)
	s.calls++
	return s.answers[i]()
}

func answer(st *appsv1.StatefulSet, err error) func() (*appsv1.StatefulSet, error) {
	return func() (*appsv1.StatefulSet, error) { return st, err }
}

var gr = schema.GroupResource{Group: "apps", Resource: "statefulsets"}

func TestWaitExitCodes(t *testing.T) {
	inProgress := sts(2, &status.VolumeClaimTemplates{ObservedGeneration: 2, Templates: []status.Template{{TemplateName: "data", ReadyReplicas: 1}}}, "data")
	done := sts(2, &status.VolumeClaimTemplates{ObservedGeneration: 2, Templates: []status.Template{{TemplateName: "data", ReadyReplicas: 3, FinishedReconciliationGeneration: 2}}}, "data")
	infeasible := sts(2, &status.VolumeClaimTemplates{ObservedGeneration: 2, Templates: []status.Template{{TemplateName: "data", InfeasibleReplicas: 1, Message: "data-web-1: cannot resize to 9Gi: OutOfRange: too big"}}}, "data")
	cases := []struct {
		name    string
		answers []func() (*appsv1.StatefulSet, error)
		timeout time.Duration
		outcome Outcome
		message string
	}{
		{"exit 0: finished after progress, a not-found and a transient error",
			[]func() (*appsv1.StatefulSet, error){answer(nil, apierrors.NewNotFound(gr, "web")), answer(nil, apierrors.NewServerTimeout(gr, "get", 1)),
				answer(inProgress, nil), answer(done, nil)}, 20 * time.Second, Finished, "finished for generation 2"},
		{"exit 1: infeasible with the PVC and driver message",
			[]func() (*appsv1.StatefulSet, error){answer(inProgress, nil), answer(infeasible, nil)}, 20 * time.Second, Infeasible,
			"data-web-1: cannot resize to 9Gi: OutOfRange: too big"},
		{"exit 2: timeout reports the last state",
			[]func() (*appsv1.StatefulSet, error){answer(inProgress, nil)}, 50 * time.Millisecond, TimedOut, "1 of 3 replicas ready"},
		{"exit 3: no permission",
			[]func() (*appsv1.StatefulSet, error){answer(nil, apierrors.NewForbidden(gr, "web", errors.New("RBAC")))}, 20 * time.Second, Failed, "forbidden"},
		{"exit 3: non-positive timeout", []func() (*appsv1.StatefulSet, error){answer(done, nil)}, 0, Failed, "timeout must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var progress []string
			v := Wait(context.Background(), &scripted{answers: tc.answers}, "ns", "web",
				Options{Timeout: tc.timeout, Interval: time.Millisecond, Progress: func(m string) { progress = append(progress, m) }})
			if v.Outcome != tc.outcome || !v.Done || !strings.Contains(v.Message, tc.message) {
				t.Errorf("got %+v, want outcome %d with %q", v, tc.outcome, tc.message)
			}
			if tc.outcome == Finished && len(progress) != 3 {
				t.Errorf("progress messages %q, want one per state change (3)", progress)
			}
		})
	}
}

func TestWaitInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	inProgress := sts(1, nil, "data")
	getter := &scripted{answers: []func() (*appsv1.StatefulSet, error){func() (*appsv1.StatefulSet, error) {
		cancel() // e.g. SIGINT while waiting
		return inProgress, nil
	}}}
	v := Wait(ctx, getter, "ns", "web", Options{Timeout: time.Minute, Interval: time.Millisecond})
	if v.Outcome != Failed || !strings.Contains(v.Message, "interrupted") {
		t.Errorf("got %+v", v)
	}
}

// Through a clientset (client-go's fake): the controller (played by the
// test) writes the status annotation while wait polls.
func TestWaitWithClientset(t *testing.T) {
	client := fake.NewClientset(sts(1, &status.VolumeClaimTemplates{ObservedGeneration: 1,
		Templates: []status.Template{{TemplateName: "data", ReadyReplicas: 2}}}, "data"))
	var once sync.Once
	v := Wait(context.Background(), ClientGetter{Client: client}, "ns", "web", Options{Timeout: 20 * time.Second, Interval: time.Millisecond,
		Progress: func(string) {
			once.Do(func() {
				value, _ := status.VolumeClaimTemplates{ObservedGeneration: 1, Templates: []status.Template{
					{TemplateName: "data", ReadyReplicas: 3, FinishedReconciliationGeneration: 1}}}.Encode()
				s := sts(1, nil, "data")
				s.Annotations = map[string]string{status.Annotation: value}
				if _, err := client.AppsV1().StatefulSets("ns").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
					t.Error(err)
				}
			})
		}})
	if v.Outcome != Finished {
		t.Errorf("got %+v", v)
	}
}

func TestParseTarget(t *testing.T) {
	if ns, name, err := ParseTarget("default/web"); err != nil || ns != "default" || name != "web" {
		t.Errorf("default/web: %q %q %v", ns, name, err)
	}
	for _, bad := range []string{"", "web", "/web", "default/", "a/b/c", "Bad_NS/web", "default/Web!"} {
		if _, _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) succeeded", bad)
		}
	}
}

// A webhook-applied size change through the re-create: the old object with
// the desire and a status from before it, then the same with the volumes
// resized and a re-create to come, then no object (between the delete and the
// create), then the new object (another uid, generation 1) carrying the old
// document, then its own finished document. Only the last one ends the wait.
func TestWaitThroughTheRecreate(t *testing.T) {
	const want = `[{"name":"data","storage":"2Gi"}]`
	old := func(st status.VolumeClaimTemplates) *appsv1.StatefulSet {
		st.UID = "old"
		s := sts(2, &st, "data")
		s.UID = "old"
		s.Annotations[desired.Annotation] = want
		return s
	}
	finished := []status.Template{{TemplateName: "data", ReadyReplicas: 3, FinishedReconciliationGeneration: 2}}
	before := old(status.VolumeClaimTemplates{ObservedGeneration: 2, Templates: finished})
	resized := old(status.VolumeClaimTemplates{ObservedGeneration: 2, Desired: want, Recreate: true, Templates: finished})
	copied := sts(1, nil, "data")
	copied.UID = "new"
	copied.Annotations = map[string]string{status.Annotation: resized.Annotations[status.Annotation]}
	recreated := sts(1, &status.VolumeClaimTemplates{ObservedGeneration: 1, UID: "new",
		Templates: []status.Template{{TemplateName: "data", ReadyReplicas: 3, FinishedReconciliationGeneration: 1}}}, "data")
	recreated.UID = "new"

	var progress []string
	v := Wait(context.Background(), &scripted{answers: []func() (*appsv1.StatefulSet, error){
		answer(before, nil), answer(resized, nil), answer(nil, apierrors.NewNotFound(gr, "web")), answer(copied, nil), answer(recreated, nil),
	}}, "ns", "web", Options{Timeout: 20 * time.Second, Interval: time.Millisecond, Progress: func(m string) { progress = append(progress, m) }})
	if v.Outcome != Finished || !strings.Contains(v.Message, "finished for generation 1") {
		t.Fatalf("got %+v, want finished for the re-created object's generation 1", v)
	}
	if len(progress) != 4 {
		t.Fatalf("progress %q, want one message per state before the end (4)", progress)
	}
	// What a CI log shows during the re-create says that it is one, not that something is
	// missing or that statefulset-resizer may not be running.
	for i, want := range map[int]string{2: "statefulset-resizer is re-creating it", 3: "the StatefulSet was re-created"} {
		if !strings.Contains(progress[i], want) || strings.Contains(progress[i], "is statefulset-resizer running") {
			t.Errorf("progress[%d] = %q, want it to say %q", i, progress[i], want)
		}
	}
}

// A StatefulSet missing without a re-create to come is just missing.
func TestWaitNotFoundWithoutRecreate(t *testing.T) {
	var progress []string
	v := Wait(context.Background(), &scripted{answers: []func() (*appsv1.StatefulSet, error){
		answer(nil, apierrors.NewNotFound(gr, "web")),
	}}, "ns", "web", Options{Timeout: 50 * time.Millisecond, Interval: time.Millisecond, Progress: func(m string) { progress = append(progress, m) }})
	if v.Outcome != TimedOut || len(progress) == 0 || progress[0] != "StatefulSet ns/web not found" {
		t.Errorf("got %+v, progress %q; want a timeout after \"StatefulSet ns/web not found\"", v, progress)
	}
}
