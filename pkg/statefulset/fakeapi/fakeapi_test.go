package fakeapi

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	clienttesting "k8s.io/client-go/testing"
)

func TestClientsetAndInformers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}}
	s := New(t, pvc, sc)
	client := s.Clientset(t)

	got, err := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Name != "a" {
		t.Fatalf("get: %v %v", got, err)
	}
	if _, err := client.StorageV1().StorageClasses().Get(ctx, "fast", metav1.GetOptions{}); err != nil {
		t.Fatalf("get cluster-scoped: %v", err)
	}
	if _, err := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get missing: %v", err)
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	lister := factory.Core().V1().PersistentVolumeClaims().Lister()
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }() // Shutdown waits for the informers to stop
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	if _, err := lister.PersistentVolumeClaims("ns").Get("a"); err != nil {
		t.Fatalf("informer missed the initial object: %v", err)
	}

	patched, err := client.CoreV1().PersistentVolumeClaims("ns").Patch(ctx, "a", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"k":"v"}}}`), metav1.PatchOptions{})
	if err != nil || patched.Annotations["k"] != "v" {
		t.Fatalf("patch: %v %v", patched, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		p, err := lister.PersistentVolumeClaims("ns").Get("a")
		return err == nil && p.Annotations["k"] == "v", nil
	}); err != nil {
		t.Fatalf("informer did not see the patch: %v", err)
	}
	if n := len(s.ActionsFor("patch", "persistentvolumeclaims")); n != 1 {
		t.Errorf("recorded %d patches", n)
	}

	s.PrependReactor("patch", "persistentvolumeclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("persistentvolumeclaims"), "a", nil)
	})
	_, err = client.CoreV1().PersistentVolumeClaims("ns").Patch(ctx, "a", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("injected error: got %v", err)
	}
}

func TestResourceVersions(t *testing.T) {
	ctx := context.Background()
	s := New(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}})
	client := s.Clientset(t)
	got, err := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.ResourceVersion == "" {
		t.Fatalf("get: rv %q, %v", got.ResourceVersion, err)
	}
	patch := []byte(`{"metadata":{"resourceVersion":"` + got.ResourceVersion + `","labels":{"x":"y"}}}`)
	updated, err := client.CoreV1().PersistentVolumeClaims("ns").Patch(ctx, "a", types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil || updated.ResourceVersion == got.ResourceVersion {
		t.Fatalf("patch with the current version: rv %q, %v", updated.ResourceVersion, err)
	}
	// The same precondition is stale now.
	_, err = client.CoreV1().PersistentVolumeClaims("ns").Patch(ctx, "a", types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale precondition: got %v, want a conflict", err)
	}
}
