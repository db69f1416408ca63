package policy

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 999, time.FixedZone("CET", 3600))
	r := Record{Time: at, From: resource.MustParse("10Gi"), To: resource.MustParse("11Gi"), Reason: ReasonThresholdBytes, FSCapacity: 10501771264}
	v := FormatRecord(r)
	want := `{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"11Gi","reason":"threshold-bytes","fsCapacity":10501771264}`
	if v != want {
		t.Fatalf("FormatRecord:\n%s\nwant\n%s", v, want)
	}
	got, p := ParseRecord(testPVC(map[string]string{AnnLastResize: v}))
	if p != nil || got == nil {
		t.Fatalf("ParseRecord: %v", p)
	}
	if !got.Time.Equal(at.Truncate(time.Second)) || got.From.Cmp(r.From) != 0 || got.To.Cmp(r.To) != 0 || got.Reason != r.Reason || got.FSCapacity != r.FSCapacity {
		t.Errorf("round trip: %+v, want %+v", got, r)
	}
	if got, p := ParseRecord(testPVC(nil)); got != nil || p != nil {
		t.Errorf("no annotation: %+v %v", got, p)
	}
	// fsCapacity is optional (a sibling raise without stats).
	if _, p := ParseRecord(testPVC(map[string]string{AnnLastResize: `{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"20Gi","reason":"siblings"}`})); p != nil {
		t.Errorf("without fsCapacity: %v", p)
	}
}

func TestRecordBadValues(t *testing.T) {
	for _, v := range []string{
		``,
		`junk`,
		`{}`,
		`{"time":"yesterday","from":"10Gi","to":"11Gi","reason":"threshold-bytes"}`,
		`{"from":"10Gi","to":"11Gi","reason":"threshold-bytes"}`,
		`{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"0","reason":"threshold-bytes"}`,
		`{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"eleven","reason":"threshold-bytes"}`,
		`{"time":"2026-11-29T07:00:00Z","from":"-1","to":"11Gi","reason":"threshold-bytes"}`,
		`{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"11Gi","reason":"because"}`,
		`{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"11Gi","reason":"threshold-bytes","fsCapacity":-1}`,
		`{"time":"2026-11-29T07:00:00Z","from":"10Gi","to":"10E","reason":"threshold-bytes"}`,
	} {
		got, p := ParseRecord(testPVC(map[string]string{AnnLastResize: v}))
		if got != nil || p == nil {
			t.Errorf("%s: record %+v, problem %v", v, got, p)
			continue
		}
		if e := p.Error(); !strings.HasPrefix(e, "PVC ns/x: annotation "+AnnLastResize+"=") || !strings.Contains(e, "remove the annotation to reset it") {
			t.Errorf("%s: %s", v, e)
		}
	}
}
