package controller

import (
	"context"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/resize"
)

// versionWriter is a status.Writer that answers each status write with the next
// resourceVersion, or with the PVC unchanged (a no-op write) when noop is set.
type versionWriter struct {
	next int
	noop bool
}

func (w *versionWriter) PatchClaimStatus(_ context.Context, pvc *v1.PersistentVolumeClaim, st v1.PersistentVolumeClaimStatus, _ map[string]*string, _ bool) (*v1.PersistentVolumeClaim, error) {
	out := pvc.DeepCopy()
	out.Status = st
	if !w.noop {
		w.next++
		out.ResourceVersion = strconv.Itoa(w.next)
	}
	return out, nil
}

func (w *versionWriter) PatchVolume(context.Context, *v1.PersistentVolume, resource.Quantity, map[string]*string) (*v1.PersistentVolume, error) {
	panic("not used")
}

// TestCacheBehindOwnWritesIsStale: after the controller wrote over version 1 (→ 2) and then
// over 2 (→ 3), a cache still at 1 or 2 is behind its writes, and a sync must not decide on
// it (that would start the step the writes already recorded: another guarded write that
// can only conflict, or worse). The latest write's version is current, and so is a version
// the controller never saw.
func TestCacheBehindOwnWritesIsStale(t *testing.T) {
	w := &versionWriter{next: 1}
	c := &Controller{cfg: Config{Writer: w, Metrics: metrics.NewRecorder("d")}, claims: map[string]*claimMemory{}}
	const key = "ns/data"
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data", ResourceVersion: "1"}}
	if c.isStale(key, "1") {
		t.Fatal("stale before any write")
	}
	for range 2 {
		out, err := c.writeStatus(context.Background(), key, pvc, v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}, resize.WriteFailed, true)
		if err != nil {
			t.Fatal(err)
		}
		pvc = out
	}
	for rv, want := range map[string]bool{"1": true, "2": true, "3": false, "17": false} {
		if got := c.isStale(key, rv); got != want {
			t.Errorf("isStale(%s) after writes 1→2→3 = %v, want %v", rv, got, want)
		}
	}
	// A write the apiserver found to change nothing keeps the version: the cache at that
	// version is current, or the PVC would be retried forever.
	w.noop = true
	if _, err := c.writeStatus(context.Background(), key, pvc, v1.PersistentVolumeClaimStatus{Phase: v1.ClaimLost}, resize.WriteFailed, false); err != nil {
		t.Fatal(err)
	}
	if c.isStale(key, "3") {
		t.Error("isStale(3) after a write that kept version 3 = true, want false")
	}
	// Memory is bounded however many writes a PVC sees.
	w.noop = false
	for range 3 * maxOwnVersions {
		out, _ := c.writeStatus(context.Background(), key, pvc, v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound}, resize.WriteFailed, true)
		pvc = out
	}
	if m := c.memory(key); len(m.ownVersions) > maxOwnVersions || len(m.superseded) > maxOwnVersions {
		t.Errorf("remembered %d own and %d superseded versions, bound is %d", len(m.ownVersions), len(m.superseded), maxOwnVersions)
	}
}
