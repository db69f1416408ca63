package kubetest

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// Event is one event recorded by Recorder.
type Event struct {
	// Object is "namespace/name" of the involved object.
	Object  string
	Type    string
	Reason  string
	Message string
}

func (e Event) String() string {
	return fmt.Sprintf("%s %s %s: %s", e.Object, e.Type, e.Reason, e.Message)
}

// Recorder is a record.EventRecorder that keeps every event. Each event stands for one API
// write (an Event create) in the real sidecar, so tests count them as writes.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

var _ record.EventRecorder = &Recorder{}

// Event implements record.EventRecorder.
func (r *Recorder) Event(obj runtime.Object, eventtype, reason, message string) {
	e := Event{Type: eventtype, Reason: reason, Message: message}
	if m, err := meta.Accessor(obj); err == nil {
		e.Object = m.GetNamespace() + "/" + m.GetName()
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Eventf implements record.EventRecorder.
func (r *Recorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf implements record.EventRecorder.
func (r *Recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, messageFmt string, args ...any) {
	r.Eventf(obj, eventtype, reason, messageFmt, args...)
}

// Events returns the events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Reasons returns the reasons of the events recorded so far, in order.
func (r *Recorder) Reasons() []string {
	var out []string
	for _, e := range r.Events() {
		out = append(out, e.Reason)
	}
	return out
}

// Count returns how many events with reason were recorded.
func (r *Recorder) Count(reason string) int {
	n := 0
	for _, e := range r.Events() {
		if e.Reason == reason {
			n++
		}
	}
	return n
}
