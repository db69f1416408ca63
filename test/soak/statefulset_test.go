//go:build integration

package soak

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The StatefulSets of the soak: statefulset-resizer (with its shipped RBAC) follows a few
// StatefulSets whose volumeClaimTemplates grow during the chaos; their PVCs go through the same
// faults as the others and the same per-PVC invariants, and at the end the status annotation
// must agree with them.

const (
	setCount    = 2
	setReplicas = 2
	setMaxSize  = 30 * gi // below the driver's limits: a template is never refused
)

// setUpStatefulSets starts statefulset-resizer and creates the StatefulSets, their PVCs bound to
// volumes made in advance; the PVCs join the soak's claims.
func (s *soak) setUpStatefulSets(t *testing.T) {
	e := s.env
	kc := scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace)
	s.setResizer = e.StartStatefulSetResizer(t, kc, "-v=2")
	for i := 0; i < setCount; i++ {
		name := fmt.Sprintf("web%d", i)
		ids := e.CreateStatefulSet(t, e.NewStatefulSet(scenario.StatefulSetOptions{Name: name, Replicas: setReplicas, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
		for o := 0; o < setReplicas; o++ {
			claim := scenario.ClaimName(name, o)
			s.claims = append(s.claims, claimRef{NS: e.Namespace, Name: claim, Volume: ids[claim], Set: name})
		}
		s.sets = append(s.sets, name)
	}
}

// growTemplate raises one StatefulSet's template by 1-3Gi, the way a user does on an apiserver
// that refuses volumeClaimTemplates changes: delete --cascade=orphan and create again.
func (s *soak) growTemplate(t *testing.T) {
	if len(s.sets) == 0 {
		return
	}
	name := s.sets[s.rng.Intn(len(s.sets))]
	sts, err := s.env.Client.AppsV1().StatefulSets(s.env.Namespace).Get(s.env.Ctx, name, metav1.GetOptions{})
	if err != nil {
		s.chaos.add("template-skipped", "", fmt.Sprintf("%s: %v", name, err))
		return
	}
	cur := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
	next := cur.Value() + int64(1+s.rng.Intn(3))*gi
	if next > setMaxSize {
		return
	}
	size := resource.NewQuantity(next, resource.BinarySI).String()
	s.chaos.add("template", "", fmt.Sprintf("StatefulSet %s template %s -> %s (delete --cascade=orphan, create)", name, cur.String(), size))
	s.env.RecreateStatefulSet(t, name, scenario.WithSize(size))
}

// checkStatefulSets: each StatefulSet's status annotation, once written for its generation,
// counts as ready exactly the replicas whose PVC capacity reaches the template, and says
// finished when all do.
func (s *soak) checkStatefulSets(t *testing.T) []violation {
	var out []violation
	for _, name := range s.sets {
		var why string
		deadline := time.Now().Add(2 * time.Minute)
		for {
			why = s.setDisagreement(t, name)
			if why == "" || time.Now().After(deadline) {
				break
			}
			pause(s.env.Ctx, time.Second)
		}
		if why != "" {
			out = append(out, violation{"statefulset-status", s.env.Namespace + "/" + scenario.ClaimName(name, 0), "StatefulSet " + name + ": " + why})
		}
	}
	return out
}

func (s *soak) setDisagreement(t *testing.T, name string) string {
	sts, err := s.env.Client.AppsV1().StatefulSets(s.env.Namespace).Get(s.env.Ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	st, err := status.FromStatefulSet(sts)
	if err != nil || st == nil || st.ObservedGeneration != sts.Generation || st.Template(scenario.TemplateName) == nil {
		return fmt.Sprintf("no status annotation for generation %d yet (%v): %s", sts.Generation, err, sts.Annotations[status.Annotation])
	}
	ts := st.Template(scenario.TemplateName)
	want := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
	ready := int32(0)
	for o := 0; o < int(*sts.Spec.Replicas); o++ {
		pvc, err := s.env.Client.CoreV1().PersistentVolumeClaims(s.env.Namespace).Get(s.env.Ctx, scenario.ClaimName(name, o), metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if c := pvc.Status.Capacity[v1.ResourceStorage]; c.Cmp(want) >= 0 {
			ready++
		}
	}
	finished := ts.FinishedReconciliationGeneration == sts.Generation
	if ts.ReadyReplicas != ready || finished != (ready == *sts.Spec.Replicas) {
		return fmt.Sprintf("template %s: annotation says %d ready, finished at generation %d (generation %d); the PVCs have %d at the template size",
			want.String(), ts.ReadyReplicas, ts.FinishedReconciliationGeneration, sts.Generation, ready)
	}
	return ""
}
