package policy

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const gi = int64(1) << 30

// testPVC is the bound claim ns/x of 10Gi with the given annotations.
func testPVC(ann map[string]string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", Annotations: ann},
		Spec: v1.PersistentVolumeClaimSpec{
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Gi")}},
		},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:    v1.ClaimBound,
			Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Gi")},
		},
	}
}

// testSC is the StorageClass "fast", which allows expansion.
func testSC(ann map[string]string) *storagev1.StorageClass {
	yes := true
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast", Annotations: ann}, AllowVolumeExpansion: &yes}
}

func TestOptIn(t *testing.T) {
	limit := map[string]string{AnnLimit: "100Gi"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		sc      map[string]string
		noSC    bool
		pvc     map[string]string
		all     bool
		want    bool
		wantWhy string
	}{
		{name: "nothing", pvc: limit, wantWhy: "neither the PVC nor its StorageClass"},
		{name: "class, pvc-autoresizer's key", sc: map[string]string{TopoLVMEnabled: "true"}, pvc: limit, want: true},
		{name: "class, our key", sc: map[string]string{AnnAutoscale: "true"}, pvc: limit, want: true},
		{name: "PVC, our key", pvc: with(limit, AnnAutoscale, "true"), want: true},
		{name: "PVC, pvc-autoresizer's key", pvc: with(limit, TopoLVMEnabled, "true"), want: true},
		{name: "PVC without a class", noSC: true, pvc: with(limit, AnnAutoscale, "true"), want: true},
		{name: "PVC opts out of an opted-in class", sc: map[string]string{TopoLVMEnabled: "true"}, pvc: with(limit, AnnAutoscale, "false"), wantWhy: "the PVC opts out"},
		{name: "PVC opts out over its own pvc-autoresizer key", pvc: with(limit, AnnAutoscale, "false", TopoLVMEnabled, "true"), wantWhy: "the PVC opts out"},
		{name: "our class key overrides theirs", sc: map[string]string{AnnAutoscale: "false", TopoLVMEnabled: "true"}, pvc: limit, wantWhy: "StorageClass fast opts out"},
		{name: "PVC opts in to an opted-out class", sc: map[string]string{AnnAutoscale: "false"}, pvc: with(limit, AnnAutoscale, "true"), want: true},
		{name: "pvc-autoresizer's key enables only on exactly true", sc: map[string]string{TopoLVMEnabled: "True"}, pvc: limit, wantWhy: "neither"},
		{name: "all classes", pvc: limit, all: true, want: true},
		{name: "all classes, class opts out", sc: map[string]string{AnnAutoscale: "false"}, pvc: limit, all: true, wantWhy: "StorageClass fast opts out"},
		{name: "all classes, PVC opts out", pvc: with(limit, AnnAutoscale, "false"), all: true, wantWhy: "the PVC opts out"},
		{name: "opted in, no limit anywhere", sc: map[string]string{TopoLVMEnabled: "true"}, wantWhy: "no limit: set annotation " + AnnLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := testSC(tc.sc)
			if tc.noSC {
				sc = nil
			}
			d := NewDefaults()
			d.AllClasses = tc.all
			s, ok := Parse(sc, testPVC(tc.pvc), d)
			if !ok || len(s.Problems) > 0 {
				t.Fatalf("problems: %v", s.Problems)
			}
			if s.Enabled != tc.want || !strings.Contains(s.Why, tc.wantWhy) || s.Enabled && s.Why != "" {
				t.Errorf("enabled %v (%q), want %v (%q)", s.Enabled, s.Why, tc.want, tc.wantWhy)
			}
		})
	}
}

// TestPrecedence checks each setting's order: ours on the PVC, pvc-autoresizer's on the PVC,
// ours on the StorageClass, the default.
func TestPrecedence(t *testing.T) {
	type layer struct{ pvcOurs, pvcTheirs, scOurs string }
	for _, tc := range []struct {
		name         string
		ours, theirs string
		get          func(Settings) string
		def          string
		layers       []layer // each line adds one more source; the want is its first column set
		wants        []string
	}{
		{"threshold", AnnThreshold, TopoLVMThreshold, func(s Settings) string { return s.Threshold.String() }, "10%",
			[]layer{{scOurs: "5Gi"}, {pvcTheirs: "20%", scOurs: "5Gi"}, {pvcOurs: "3%", pvcTheirs: "20%", scOurs: "5Gi"}},
			[]string{"5Gi", "20%", "3%"}},
		{"inodes threshold", AnnInodesThreshold, TopoLVMInodesThreshold, func(s Settings) string { return s.InodesThreshold.String() }, "10%",
			[]layer{{scOurs: "5%"}, {pvcTheirs: "20%", scOurs: "5%"}, {pvcOurs: "3%", pvcTheirs: "20%", scOurs: "5%"}},
			[]string{"5%", "20%", "3%"}},
		{"increase", AnnIncrease, TopoLVMIncrease, func(s Settings) string { return s.Increase.String() }, "10%",
			[]layer{{scOurs: "2Gi"}, {pvcTheirs: "20Gi", scOurs: "2Gi"}, {pvcOurs: "50%", pvcTheirs: "20Gi", scOurs: "2Gi"}},
			[]string{"2Gi", "20Gi", "50%"}},
		{"limit", AnnLimit, TopoLVMStorageLimit, func(s Settings) string { return qstr(s.Limit) + " from " + s.LimitFrom }, "",
			[]layer{{scOurs: "50Gi"}, {pvcTheirs: "60Gi", scOurs: "50Gi"}, {pvcOurs: "70Gi", pvcTheirs: "60Gi", scOurs: "50Gi"}},
			[]string{"50Gi from StorageClass fast's annotation " + AnnLimit, "60Gi from annotation " + TopoLVMStorageLimit, "70Gi from annotation " + AnnLimit}},
		{"min increase", AnnMinIncrease, "", func(s Settings) string { return qstr(s.MinIncrease) }, "1Gi",
			[]layer{{scOurs: "2Gi"}, {pvcOurs: "3Gi", scOurs: "2Gi"}}, []string{"2Gi", "3Gi"}},
		{"cooldown", AnnCooldown, "", func(s Settings) string { return s.Cooldown.String() }, "10m0s",
			[]layer{{scOurs: "6h"}, {pvcOurs: "0s", scOurs: "6h"}}, []string{"6h0m0s", "0s"}},
		{"siblings", AnnSiblings, "", func(s Settings) string { return map[bool]string{true: "on", false: "off"}[s.Siblings] }, "on",
			[]layer{{scOurs: "false"}, {pvcOurs: "true", scOurs: "false"}}, []string{"off", "on"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := map[string]string{AnnAutoscale: "true"}
			if tc.name != "limit" {
				base[AnnLimit] = "100Gi"
			}
			d := NewDefaults()
			d.Limit = 80 * gi
			if def := tc.get(mustParse(t, nil, testPVC(base), d)); tc.def != "" && def != tc.def {
				t.Errorf("default: %s, want %s", def, tc.def)
			}
			for i, l := range tc.layers {
				pvcAnn, scAnn := map[string]string{}, map[string]string{}
				for k, v := range base {
					pvcAnn[k] = v
				}
				set := func(m map[string]string, k, v string) {
					if v != "" {
						m[k] = v
					}
				}
				set(pvcAnn, tc.ours, l.pvcOurs)
				set(pvcAnn, tc.theirs, l.pvcTheirs)
				set(scAnn, tc.ours, l.scOurs)
				if got := tc.get(mustParse(t, testSC(scAnn), testPVC(pvcAnn), d)); got != tc.wants[i] {
					t.Errorf("layers %+v: %s, want %s", l, got, tc.wants[i])
				}
			}
		})
	}
}

func mustParse(t *testing.T, sc *storagev1.StorageClass, pvc *v1.PersistentVolumeClaim, d Defaults) Settings {
	t.Helper()
	s, ok := Parse(sc, pvc, d)
	if !ok {
		t.Fatalf("problems: %v", s.Problems)
	}
	if !s.Enabled {
		t.Fatalf("not enabled: %s", s.Why)
	}
	return s
}

// TestBadAnnotations checks every kind of bad value: Parse says ok=false, the settings carry
// exactly one problem, and its text names the PVC, the annotation, where it is, the value and
// the fix.
func TestBadAnnotations(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		onClass    bool
		want       string
	}{
		{AnnThreshold, "ten", false, `PVC ns/x: annotation csi-resizer.io/autoscale-threshold="ten": want a percent like "10%" or a quantity like "5Gi"`},
		{AnnThreshold, "100%", false, `PVC ns/x: annotation csi-resizer.io/autoscale-threshold="100%": want a percent above 0% and below 100% like "10%", or a quantity like "5Gi"`},
		{AnnThreshold, "0%", false, `annotation csi-resizer.io/autoscale-threshold="0%": want a percent above 0% and below 100%`},
		{AnnThreshold, "0", false, `annotation csi-resizer.io/autoscale-threshold="0": want a percent like "10%" or a quantity like "5Gi"`},
		{AnnThreshold, "ten", true, `PVC ns/x: StorageClass fast's annotation csi-resizer.io/autoscale-threshold="ten": want a percent like`},
		{TopoLVMThreshold, "-5Gi", false, `PVC ns/x: annotation resize.topolvm.io/threshold="-5Gi": want a percent like "10%" or a quantity like "5Gi"`},
		{AnnInodesThreshold, "5Gi", false, `PVC ns/x: annotation csi-resizer.io/autoscale-inodes-threshold="5Gi": want a percent above 0% and below 100% like "10%"`},
		{TopoLVMInodesThreshold, "150%", false, `annotation resize.topolvm.io/inodes-threshold="150%": want a percent above 0% and below 100%`},
		{AnnIncrease, "lots", false, `PVC ns/x: annotation csi-resizer.io/autoscale-increase="lots": want a percent like "10%" or a quantity like "5Gi"`},
		{AnnIncrease, "1001%", false, `annotation csi-resizer.io/autoscale-increase="1001%": want a percent above 0% and at most 1000% like "10%", or a quantity like "1Gi"`},
		{TopoLVMIncrease, "0%", false, `annotation resize.topolvm.io/increase="0%": want a percent above 0% and at most 1000%`},
		{AnnMinIncrease, "10%", false, `PVC ns/x: annotation csi-resizer.io/autoscale-min-increase="10%": want a quantity above zero like "100Gi"`},
		{AnnLimit, "0", false, `PVC ns/x: annotation csi-resizer.io/autoscale-limit="0": want a quantity above zero like "100Gi"`},
		{AnnLimit, "big", true, `PVC ns/x: StorageClass fast's annotation csi-resizer.io/autoscale-limit="big": want a quantity above zero`},
		{TopoLVMStorageLimit, "100 Gi", false, `PVC ns/x: annotation resize.topolvm.io/storage_limit="100 Gi": want a quantity like "100Gi" ("0" turns the limit off)`},
		{AnnCooldown, "6 hours", false, `PVC ns/x: annotation csi-resizer.io/autoscale-cooldown="6 hours": want a Go duration of zero or more like "10m" or "6h"`},
		{AnnCooldown, "-1m", false, `annotation csi-resizer.io/autoscale-cooldown="-1m": want a Go duration of zero or more`},
		{AnnSiblings, "yes", false, `PVC ns/x: annotation csi-resizer.io/autoscale-siblings="yes": want "true" or "false"`},
		{AnnAutoscale, "yes", false, `PVC ns/x: annotation csi-resizer.io/autoscale="yes": want "true" or "false"`},
		{AnnAutoscale, "on", true, `PVC ns/x: StorageClass fast's annotation csi-resizer.io/autoscale="on": want "true" or "false"`},
		{TopoLVMGroupBy, "not a label!", false, `PVC ns/x: annotation resize.topolvm.io/initial-resize-group-by="not a label!": want a label key like "app.kubernetes.io/name"`},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			pvcAnn := map[string]string{TopoLVMEnabled: "true", TopoLVMStorageLimit: "100Gi"}
			scAnn := map[string]string{}
			if tc.key == AnnAutoscale && tc.onClass {
				delete(pvcAnn, TopoLVMEnabled) // the class's key is read only without the PVC's
			}
			if tc.onClass {
				scAnn[tc.key] = tc.value
			} else {
				pvcAnn[tc.key] = tc.value
			}
			if tc.key == AnnLimit && tc.onClass {
				delete(pvcAnn, TopoLVMStorageLimit)
			}
			s, ok := Parse(testSC(scAnn), testPVC(pvcAnn), NewDefaults())
			if ok || len(s.Problems) != 1 {
				t.Fatalf("ok=%v problems %v, want one", ok, s.Problems)
			}
			p := s.Problems[0]
			if !strings.Contains(p.Error(), tc.want) || p.Annotation != tc.key || p.Value != tc.value || p.Object != "ns/x" {
				t.Errorf("problem %+v\n%s\nwant it to contain\n%s", p, p.Error(), tc.want)
			}
			if d := Decide(Input{PVC: testPVC(pvcAnn), Settings: s, Now: time.Unix(0, 0)}); d.Action != Skip || d.Reason != SkipBadSettings ||
				len(d.Problems) != 1 || !strings.Contains(d.Message, tc.want) {
				t.Errorf("Decide: %+v", d)
			}
		})
	}
}

func TestParseLimitRules(t *testing.T) {
	t.Run("pvc-autoresizer's zero limit is ignored, as it documents", func(t *testing.T) {
		pvc := testPVC(map[string]string{TopoLVMEnabled: "true", TopoLVMStorageLimit: "0"})
		s, ok := Parse(nil, pvc, NewDefaults())
		if !ok || s.Enabled || !strings.Contains(s.Why, "no limit") {
			t.Errorf("ok=%v enabled=%v why %q problems %v", ok, s.Enabled, s.Why, s.Problems)
		}
		// ... and the next source applies: our key on the class, then the default.
		s = mustParse(t, testSC(map[string]string{AnnLimit: "40Gi"}), pvc, NewDefaults())
		if s.Limit != 40*gi {
			t.Errorf("limit %d, want the class's 40Gi", s.Limit)
		}
		d := NewDefaults()
		d.Limit = 30 * gi
		if s = mustParse(t, nil, pvc, d); s.Limit != 30*gi || s.LimitFrom != "the default limit" {
			t.Errorf("limit %d from %q, want the default 30Gi", s.Limit, s.LimitFrom)
		}
	})
	t.Run("a default limit enables a PVC without one", func(t *testing.T) {
		d := NewDefaults()
		d.Limit = 30 * gi
		if s := mustParse(t, testSC(map[string]string{TopoLVMEnabled: "true"}), testPVC(nil), d); s.Limit != 30*gi {
			t.Errorf("limit %d", s.Limit)
		}
	})
	t.Run("a bad pvc-autoresizer value under ours is not read", func(t *testing.T) {
		pvc := testPVC(map[string]string{AnnAutoscale: "true", AnnLimit: "20Gi", TopoLVMStorageLimit: "junk", AnnThreshold: "5%", TopoLVMThreshold: "junk"})
		if s := mustParse(t, nil, pvc, NewDefaults()); s.Limit != 20*gi || s.Threshold != PercentAmount(500) {
			t.Errorf("settings %+v", s)
		}
	})
	t.Run("a PVC that is not opted in is not checked", func(t *testing.T) {
		s, ok := Parse(testSC(nil), testPVC(map[string]string{AnnThreshold: "junk", AnnLimit: "junk"}), NewDefaults())
		if !ok || s.Enabled || len(s.Problems) != 0 {
			t.Errorf("ok=%v %+v", ok, s)
		}
	})
}

func TestParseVolumeAndClass(t *testing.T) {
	on := map[string]string{AnnAutoscale: "true", AnnLimit: "20Gi"}
	t.Run("block volume", func(t *testing.T) {
		pvc := testPVC(on)
		block := v1.PersistentVolumeBlock
		pvc.Spec.VolumeMode = &block
		s, ok := Parse(nil, pvc, NewDefaults())
		if !ok || s.Enabled || !strings.Contains(s.Why, "volumeMode Block") {
			t.Errorf("ok=%v enabled=%v why %q", ok, s.Enabled, s.Why)
		}
	})
	t.Run("class without volume expansion", func(t *testing.T) {
		for _, allow := range []*bool{nil, new(bool)} {
			sc := testSC(map[string]string{TopoLVMEnabled: "true"})
			sc.AllowVolumeExpansion = allow
			s, ok := Parse(sc, testPVC(map[string]string{AnnLimit: "20Gi"}), NewDefaults())
			want := `PVC ns/x: StorageClass fast's annotation resize.topolvm.io/enabled="true": StorageClass fast does not allow volume expansion: set allowVolumeExpansion: true on it, or remove the opt-in`
			if ok || len(s.Problems) != 1 || s.Problems[0].Error() != want {
				t.Errorf("ok=%v problems %v", ok, s.Problems)
			}
		}
	})
	t.Run("all classes, one without volume expansion", func(t *testing.T) {
		sc := testSC(nil)
		sc.AllowVolumeExpansion = nil
		d := NewDefaults()
		d.AllClasses = true
		s, ok := Parse(sc, testPVC(map[string]string{AnnLimit: "20Gi"}), d)
		if !ok || s.Enabled || s.Why != "StorageClass fast does not allow volume expansion" {
			t.Errorf("ok=%v enabled=%v why %q problems %v", ok, s.Enabled, s.Why, s.Problems)
		}
	})
	t.Run("PVC opted in, class without volume expansion", func(t *testing.T) {
		sc := testSC(nil)
		sc.AllowVolumeExpansion = nil
		s, ok := Parse(sc, testPVC(on), NewDefaults())
		want := `PVC ns/x: annotation csi-resizer.io/autoscale="true": StorageClass fast does not allow volume expansion: set allowVolumeExpansion: true on it, or remove the opt-in`
		if ok || len(s.Problems) != 1 || s.Problems[0].Error() != want {
			t.Errorf("ok=%v problems %v", ok, s.Problems)
		}
	})
	t.Run("class without volume expansion: the problem names the opt-in that applies", func(t *testing.T) {
		sc := testSC(map[string]string{AnnAutoscale: "true"})
		sc.AllowVolumeExpansion = nil
		s, _ := Parse(sc, testPVC(map[string]string{AnnLimit: "20Gi", TopoLVMEnabled: "no"}), NewDefaults())
		if len(s.Problems) != 1 || s.Problems[0].Annotation != AnnAutoscale || s.Problems[0].StorageClass != "fast" {
			t.Errorf("problems %v", s.Problems)
		}
	})
	t.Run("group-by label", func(t *testing.T) {
		pvc := testPVC(map[string]string{AnnAutoscale: "true", AnnLimit: "20Gi", TopoLVMGroupBy: "app.kubernetes.io/name"})
		if s := mustParse(t, nil, pvc, NewDefaults()); s.GroupBy != "app.kubernetes.io/name" {
			t.Errorf("group by %q", s.GroupBy)
		}
	})
	t.Run("several problems are all reported", func(t *testing.T) {
		pvc := testPVC(map[string]string{AnnAutoscale: "true", AnnLimit: "x", AnnThreshold: "y", AnnCooldown: "z"})
		if s, ok := Parse(nil, pvc, NewDefaults()); ok || len(s.Problems) != 3 {
			t.Errorf("ok=%v problems %v", ok, s.Problems)
		}
	})
}

func TestDefaultsValidate(t *testing.T) {
	if err := NewDefaults().Validate(); err != nil {
		t.Fatalf("NewDefaults: %v", err)
	}
	for name, mod := range map[string]func(*Defaults){
		"threshold":        func(d *Defaults) { d.Threshold = PercentAmount(100 * 100) },
		"inodes threshold": func(d *Defaults) { d.InodesThreshold = 0 },
		"increase":         func(d *Defaults) { d.Increase = BytesAmount(0) },
		"min increase":     func(d *Defaults) { d.MinIncrease = -1 },
		"cooldown":         func(d *Defaults) { d.Cooldown = -time.Second },
		"resize wait":      func(d *Defaults) { d.ResizeWait = 0 },
	} {
		d := NewDefaults()
		mod(&d)
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
