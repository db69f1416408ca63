package nodelocal

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const hostpathKey = "topology.hostpath.csi/node"

func node(name string, labels map[string]string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func req(key string, op v1.NodeSelectorOperator, values ...string) v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func pvWith(terms ...v1.NodeSelectorTerm) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
	if terms != nil {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: terms}}
	}
	return pv
}

func labelsTerm(rs ...v1.NodeSelectorRequirement) v1.NodeSelectorTerm {
	return v1.NodeSelectorTerm{MatchExpressions: rs}
}

func TestDecide(t *testing.T) {
	n1 := node("node-1", map[string]string{hostpathKey: "node-1", HostnameLabel: "host-1", "topology.kubernetes.io/zone": "z1"})
	for _, tc := range []struct {
		name string
		pv   *v1.PersistentVolume
		node *v1.Node
		want Verdict
	}{
		{"no affinity", pvWith(), n1, NoAffinity},
		{"affinity without required", &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{NodeAffinity: &v1.VolumeNodeAffinity{}}}, n1, NoAffinity},
		{"required without terms", &v1.PersistentVolume{Spec: v1.PersistentVolumeSpec{NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{}}}}, n1, NoAffinity},
		{"driver topology key, this node", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1"))), n1, Local},
		{"driver topology key, another node", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-2"))), n1, OtherNode},
		{"host name label", pvWith(labelsTerm(req(HostnameLabel, v1.NodeSelectorOpIn, "host-1"))), n1, Local},
		{"metadata.name field", pvWith(v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{req("metadata.name", v1.NodeSelectorOpIn, "node-1")}}), n1, Local},
		{"pinned and narrowed by the zone", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1"), req("topology.kubernetes.io/zone", v1.NodeSelectorOpIn, "z1"))), n1, Local},
		{"pinned but another zone: matches no node", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1"), req("topology.kubernetes.io/zone", v1.NodeSelectorOpIn, "z2"))), n1, OtherNode},
		{"zone shared by nodes", pvWith(labelsTerm(req("topology.kubernetes.io/zone", v1.NodeSelectorOpIn, "z1"))), n1, NotPinned},
		{"In with several node names", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1", "node-2"))), n1, NotPinned},
		{"Exists", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpExists))), n1, NotPinned},
		{"NotIn another node", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpNotIn, "node-2"))), n1, NotPinned},
		{"a label whose value is not the node's name", pvWith(labelsTerm(req("rack", v1.NodeSelectorOpIn, "r1"))), node("node-1", map[string]string{"rack": "r1"}), NotPinned},
		{"a second term for another node", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1")), labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-2"))), n1, NotPinned},
		{"a second, empty term matches nothing", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1")), v1.NodeSelectorTerm{}), n1, Local},
		{"a second term for the zone", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1")), labelsTerm(req("topology.kubernetes.io/zone", v1.NodeSelectorOpIn, "z1"))), n1, NotPinned},
		{"invalid operator", pvWith(labelsTerm(req(hostpathKey, "Near", "node-1"))), n1, Invalid},
		{"node unknown", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1"))), nil, NoNode},
		{"node without the label", pvWith(labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "node-1"))), node("node-1", nil), OtherNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Decide(tc.pv, tc.node)
			if got != tc.want {
				t.Errorf("Decide = %s (%s), want %s", got, why, tc.want)
			}
			if why == "" {
				t.Error("no reason given")
			}
		})
	}
}

// TestDecideNeverTwoNodes: for volumes pinned in every way Decide accepts, of a set of nodes
// that share every label but their identity, at most one node finds a volume Local. That is the
// promise that matters: no volume is handled by two instances.
func TestDecideNeverTwoNodes(t *testing.T) {
	var nodes []*v1.Node
	for _, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, node(name, map[string]string{hostpathKey: name, HostnameLabel: name, "zone": "z", "rack": "r"}))
	}
	terms := []v1.NodeSelectorTerm{
		labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "a")),
		labelsTerm(req(HostnameLabel, v1.NodeSelectorOpIn, "b")),
		labelsTerm(req("zone", v1.NodeSelectorOpIn, "z")),
		labelsTerm(req("rack", v1.NodeSelectorOpIn, "r"), req(hostpathKey, v1.NodeSelectorOpIn, "c")),
		labelsTerm(req(hostpathKey, v1.NodeSelectorOpIn, "a", "b")),
		{MatchFields: []v1.NodeSelectorRequirement{req("metadata.name", v1.NodeSelectorOpIn, "c")}},
	}
	// Every PV of one or two of those terms.
	for i := range terms {
		for j := i; j < len(terms); j++ {
			pv := pvWith(terms[i])
			if j != i {
				pv = pvWith(terms[i], terms[j])
			}
			var local []string
			for _, n := range nodes {
				if v, _ := Decide(pv, n); v == Local {
					local = append(local, n.Name)
				}
			}
			if len(local) > 1 {
				t.Errorf("terms %d and %d: Local on nodes %s", i, j, strings.Join(local, ", "))
			}
		}
	}
}
