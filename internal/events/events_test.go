package events

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// Events recorded right before Shutdown, after the context that made the broadcaster ended
// (the stop signal), are all written, and the flush marker is not.
func TestShutdownWritesEveryRecordedEvent(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	b := NewBroadcaster(ctx)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "test"})
	cancel()
	const n = 20
	for i := range n {
		pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("pvc-%d", i), UID: "uid"}}
		recorder.Event(pvc, v1.EventTypeNormal, "Resized", "done")
	}
	b.Shutdown()
	list, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Errorf("%d events written before Shutdown returned, want %d", len(list.Items), n)
	}
	for _, e := range list.Items {
		if e.Reason == "Flush" {
			t.Errorf("the flush marker was written: %+v", e.InvolvedObject)
		}
	}
}

// A broadcaster that never started recording shuts down at once.
func TestShutdownWithoutSink(t *testing.T) {
	b := NewBroadcaster(context.Background())
	b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "test"}).Event(&v1.ObjectReference{Kind: "Pod", Name: "p"}, v1.EventTypeNormal, "R", "m")
	b.Shutdown()
}
