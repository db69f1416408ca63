package expand

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// render shows a change map as "key=value" / "key removed", "" for no change.
func render(change map[string]*string) string {
	out := ""
	for k, v := range change {
		if v == nil {
			out += k + " removed"
		} else {
			out += k + "=" + *v
		}
	}
	return out
}

func pvWith(capacity string, ann map[string]string) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv", Annotations: ann},
		Spec:       v1.PersistentVolumeSpec{Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse(capacity)}},
	}
}

func claimWith(capacity string, ann map[string]string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: ann},
		Status:     v1.PersistentVolumeClaimStatus{Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse(capacity)}},
	}
}

func TestPreResizeCapacity(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ann          map[string]string
		pvcCapacity  string
		nodeRequired bool
		want         string
	}{
		{"node step: the PVC's capacity before the expansion", nil, "1Gi", true, AnnPreResizeCapacity + "=1Gi"},
		{"no node step: nothing", nil, "1Gi", false, ""},
		{"already there from an unfinished expansion: kept", map[string]string{AnnPreResizeCapacity: "1Gi"}, "1Gi", true, ""},
		{"already there with another value: kept, it is the older size", map[string]string{AnnPreResizeCapacity: "500Mi"}, "1Gi", true, ""},
		{"other annotations do not count", map[string]string{"x": "y"}, "2Gi", true, AnnPreResizeCapacity + "=2Gi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(PreResizeCapacity(pvWith("3Gi", tc.ann), resource.MustParse(tc.pvcCapacity), tc.nodeRequired))
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPreResizeCapacityDone(t *testing.T) {
	ann := map[string]string{AnnPreResizeCapacity: "1Gi"}
	for _, tc := range []struct {
		name        string
		pvCap       string
		pvAnn       map[string]string
		pvcCapacity string
		want        bool
	}{
		{"node finished: status.capacity reached the PV", "2Gi", ann, "2Gi", true},
		{"node finished above the PV (the driver rounded up)", "2Gi", ann, "3Gi", true},
		{"node still at work", "2Gi", ann, "1Gi", false},
		{"no annotation: nothing to remove", "2Gi", nil, "2Gi", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PreResizeCapacityDone(claimWith(tc.pvcCapacity, nil), pvWith(tc.pvCap, tc.pvAnn)); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if got := render(RemovePreResizeCapacity()); got != AnnPreResizeCapacity+" removed" {
		t.Errorf("RemovePreResizeCapacity = %q", got)
	}
}

func TestNodeExpansionNotRequired(t *testing.T) {
	has := map[string]string{AnnNodeExpansionNotRequired: "true"}
	for _, tc := range []struct {
		name   string
		ann    map[string]string
		write  ClaimWrite
		legacy bool
		want   string
	}{
		{"finished without the node: added", nil, WriteFinished, false, AnnNodeExpansionNotRequired + "=true"},
		{"finished without the node, already there: no change", has, WriteFinished, false, ""},
		{"a new step starts: removed", has, WriteStarted, false, AnnNodeExpansionNotRequired + " removed"},
		{"a new step starts, absent: no change", nil, WriteStarted, false, ""},
		{"handed to the node: removed", has, WriteNodePending, false, AnnNodeExpansionNotRequired + " removed"},
		{"handed to the node, absent: no change", nil, WriteNodePending, false, ""},
		{"a failure is recorded: untouched", has, WriteFailed, false, ""},
		{"a failure is recorded, absent: untouched", nil, WriteFailed, false, ""},
		{"legacy mode never adds", nil, WriteFinished, true, ""},
		{"legacy mode never removes", has, WriteStarted, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(NodeExpansionNotRequired(claimWith("1Gi", tc.ann), tc.write, tc.legacy)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if ExpandedWrite(true) != WriteNodePending || ExpandedWrite(false) != WriteFinished {
		t.Error("ExpandedWrite")
	}
}
