package policy

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// replica is a PVC named name, created at created, with request size; grown, when not zero,
// is when the autoscaler's record says it wrote to (to == "" means size).
func replica(name, size string, created time.Time, grown time.Time, to string) *v1.PersistentVolumeClaim {
	p := testPVC(map[string]string{})
	p.Name = name
	p.CreationTimestamp = metav1.NewTime(created)
	p.Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
	if !grown.IsZero() {
		if to == "" {
			to = size
		}
		p.Annotations[AnnLastResize] = FormatRecord(Record{Time: grown, From: resource.MustParse("10Gi"), To: resource.MustParse(to), Reason: ReasonThresholdBytes})
	}
	return p
}

func TestSiblingSize(t *testing.T) {
	day := t0.Add(-24 * time.Hour)
	none := time.Time{}
	for _, tc := range []struct {
		name     string
		pvc      *v1.PersistentVolumeClaim
		siblings []*v1.PersistentVolumeClaim
		want     string // "" for nil
	}{
		{"created after a sibling grew: raised", replica("data-web-2", "10Gi", t0, none, ""),
			[]*v1.PersistentVolumeClaim{replica("data-web-0", "15Gi", day, t0.Add(-time.Hour), "")}, "15Gi"},
		{"the largest of those that count", replica("data-web-3", "10Gi", t0, none, ""),
			[]*v1.PersistentVolumeClaim{replica("data-web-0", "15Gi", day, t0.Add(-time.Hour), ""), replica("data-web-1", "18Gi", day, t0.Add(-2*time.Hour), ""),
				replica("data-web-2", "30Gi", day, t0.Add(time.Hour), "")}, "18Gi"},
		{"created in the second of the resize: counts", replica("data-web-1", "10Gi", t0, none, ""),
			[]*v1.PersistentVolumeClaim{replica("data-web-0", "15Gi", day, t0, "")}, "15Gi"},
		{"existed when the sibling grew: not new", replica("data-web-1", "10Gi", day, none, ""),
			[]*v1.PersistentVolumeClaim{replica("data-web-0", "15Gi", day, t0, "")}, ""},
		{"a size not grown by the autoscaler (no record) does not count", replica("data-web-1", "10Gi", t0, none, ""),
			[]*v1.PersistentVolumeClaim{replica("data-web-0", "15Gi", day, none, "")}, ""},
		{"a request the record did not write (a person's, the template's) does not count", replica("data-web-1", "10Gi", t0, none, ""),
			[]*v1.PersistentVolumeClaim{replica("data-web-0", "20Gi", day, t0.Add(-time.Hour), "15Gi")}, ""},
		{"a record that does not parse does not count", replica("data-web-1", "10Gi", t0, none, ""),
			[]*v1.PersistentVolumeClaim{func() *v1.PersistentVolumeClaim {
				p := replica("data-web-0", "15Gi", day, none, "")
				p.Annotations[AnnLastResize] = "junk"
				return p
			}()}, ""},
		{"itself does not count", replica("data-web-0", "10Gi", t0, none, ""),
			[]*v1.PersistentVolumeClaim{replica("data-web-0", "15Gi", day, t0.Add(-time.Hour), "")}, ""},
		{"no siblings", replica("data-web-0", "10Gi", t0, none, ""), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SiblingSize(tc.pvc, tc.siblings)
			switch {
			case tc.want == "" && got != nil:
				t.Errorf("got %s, want none", got.String())
			case tc.want != "" && (got == nil || got.String() != tc.want):
				t.Errorf("got %v, want %s", got, tc.want)
			}
		})
	}
}
