package expandcontroller

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/csi-resizer/csi-resizer/pkg/nodelocal"
)

const topologyKey = "topology.test.csi.example.com/node"

// pinTo gives pv a required node affinity: key In values.
func pinTo(pv *v1.PersistentVolume, key string, values ...string) *v1.PersistentVolume {
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: key, Operator: v1.NodeSelectorOpIn, Values: values}},
	}}}}
	return pv
}

// nodeScope is the scope of an instance on node-1 (of zone z1), its Node in the informer cache.
func nodeScope(t *testing.T) *nodelocal.Scope {
	t.Helper()
	nodes := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Nodes()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{topologyKey: "node-1", "zone": "z1"}}}
	if err := nodes.Informer().GetIndexer().Add(node); err != nil {
		t.Fatal(err)
	}
	return nodelocal.NewScope("node-1", nodes)
}

// TestNodeDeployment: with a node scope (--node-deployment), only the volume pinned to this
// node is expanded; another node's volume, one without affinity and one whose affinity a whole
// zone matches get no call and no write, and the event filters drop only the other node's.
func TestNodeDeployment(t *testing.T) {
	local, localPV := claim("local", "2Gi", "1Gi")
	other, otherPV := claim("other", "2Gi", "1Gi")
	anywhere, anywherePV := claim("anywhere", "2Gi", "1Gi")
	zone, zonePV := claim("zone", "2Gi", "1Gi")
	pinTo(localPV, topologyKey, "node-1")
	pinTo(otherPV, topologyKey, "node-2")
	pinTo(zonePV, "zone", "z1")
	f := newFixture(t, Config{Scope: nodeScope(t)}, local, localPV, other, otherPV, anywhere, anywherePV, zone, zonePV)

	for _, name := range []string{"other", "anywhere", "zone", "local"} {
		f.sync(name)
	}
	if n := f.driver.count(); n != 1 || f.driver.calls[0].VolumeID != "vol-local" {
		t.Fatalf("driver calls %+v, want one, for vol-local", f.driver.calls)
	}
	for _, name := range []string{"other", "anywhere", "zone"} {
		if pvc := f.pvc(name); state(pvc) != "" || len(pvc.Status.Conditions) != 0 || pvc.Status.AllocatedResources != nil {
			t.Errorf("PVC %s was written: %+v", name, pvc.Status)
		}
	}
	if pvc := f.pvc("local"); storage(pvc.Status.Capacity) != "2Gi" {
		t.Errorf("local PVC capacity %s, want 2Gi", storage(pvc.Status.Capacity))
	}
	for name, want := range map[string]bool{"other": false, "anywhere": true, "zone": true, "local": true} {
		pvc, _ := f.ctrl.pvcLister.PersistentVolumeClaims(ns).Get(name)
		if got := f.ctrl.mayBeLocal(pvc); got != want {
			t.Errorf("event filter for %s: %v, want %v (only certainly another node's volume is dropped)", name, got, want)
		}
	}
}
