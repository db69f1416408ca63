package plan

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// docs/design.md §3.11 rule 15, one PVC of an opted-in StatefulSet: the
// template's keys are set where the PVC's value differs, and recorded in
// csi-resizer.io/template-metadata; a key the template dropped is removed
// only when the record holds it at the PVC's value; keys set by anyone else
// and reserved keys are never touched.
func TestRule15_TemplateMetadataOnThePVC(t *testing.T) {
	type kv = map[string]string
	const web = "web"
	cases := []struct {
		name                 string
		tmplLabels, tmplAnns kv
		pvcLabels, pvcAnns   kv     // the PVC's own, besides app=web
		record               string // the PVC's record; "" = none
		wantLabels, wantAnns kv     // the PVC after the patch (wantAnns without csi-resizer.io/statefulset)
		wantNoPatch          bool
	}{
		{name: "a new label is set and recorded",
			tmplLabels: kv{"chart": "db-1.2"},
			wantLabels: kv{"app": web, "chart": "db-1.2"},
			wantAnns:   kv{AnnotationTemplateMetadata: `{"labels":{"chart":"db-1.2"},"annotations":{}}`}},
		{name: "a value copied at creation, changed in the template, is set and recorded",
			tmplLabels: kv{"chart": "db-1.3"}, pvcLabels: kv{"chart": "db-1.2"},
			wantLabels: kv{"app": web, "chart": "db-1.3"},
			wantAnns:   kv{AnnotationTemplateMetadata: `{"labels":{"chart":"db-1.3"},"annotations":{}}`}},
		{name: "a key already at the template's value is not ours: no patch",
			tmplLabels: kv{"app": web}, wantNoPatch: true},
		{name: "our key, kept by the template: no patch",
			tmplLabels: kv{"chart": "db-1.2"}, pvcLabels: kv{"chart": "db-1.2"}, record: `{"labels":{"chart":"db-1.2"},"annotations":{}}`,
			wantNoPatch: true},
		{name: "our key dropped by the template is removed, and the record with it",
			pvcLabels: kv{"chart": "db-1.2"}, record: `{"labels":{"chart":"db-1.2"},"annotations":{}}`,
			wantLabels: kv{"app": web}, wantAnns: kv{}},
		{name: "our key changed by a person since is left, and forgotten",
			pvcLabels: kv{"chart": "mine"}, record: `{"labels":{"chart":"db-1.2"},"annotations":{}}`,
			wantLabels: kv{"app": web, "chart": "mine"}, wantAnns: kv{}},
		{name: "our key a person set to the template's new value is forgotten: theirs",
			tmplLabels: kv{"chart": "db-1.3"}, pvcLabels: kv{"chart": "db-1.3"}, record: `{"labels":{"chart":"db-1.2"},"annotations":{}}`,
			wantLabels: kv{"app": web, "chart": "db-1.3"}, wantAnns: kv{}},
		{name: "someone else's keys are never removed",
			pvcLabels: kv{"team": "a"}, pvcAnns: kv{"backup": "daily"}, wantNoPatch: true},
		{name: "annotations: set, removed when ours, kept when not",
			tmplAnns: kv{"note": "x"}, pvcAnns: kv{"old": "1", "keep": "y"}, record: `{"labels":{},"annotations":{"old":"1"}}`,
			wantLabels: kv{"app": web},
			wantAnns:   kv{"note": "x", "keep": "y", AnnotationTemplateMetadata: `{"labels":{},"annotations":{"note":"x"}}`}},
		{name: "reserved keys of the template are never set",
			tmplLabels: kv{"csi-resizer.io/statefulset": "other"},
			tmplAnns: kv{AnnotationPreResizeStorage: "100Gi", AnnotationTemplateMetadata: `{"labels":{"app":"web"}}`, corev1.LastAppliedConfigAnnotation: "{}",
				"volume.kubernetes.io/selected-node": "n2", "volume.beta.kubernetes.io/storage-class": "gold", "volume.alpha.kubernetes.io/x": "y",
				"pv.kubernetes.io/bind-completed": "no"},
			wantNoPatch: true},
		{name: "a forged record never removes a reserved key",
			pvcAnns:    kv{"volume.kubernetes.io/selected-node": "n1", "pv.kubernetes.io/bind-completed": "yes"},
			record:     `{"labels":{},"annotations":{"volume.kubernetes.io/selected-node":"n1","pv.kubernetes.io/bind-completed":"yes"}}`,
			wantLabels: kv{"app": web},
			wantAnns:   kv{"volume.kubernetes.io/selected-node": "n1", "pv.kubernetes.io/bind-completed": "yes"}},
		{name: "an unparsable record is rewritten; its keys are forgotten, not removed",
			tmplLabels: kv{"tier": "db"}, pvcLabels: kv{"chart": "db-1.2"}, record: "{",
			wantLabels: kv{"app": web, "chart": "db-1.2", "tier": "db"},
			wantAnns:   kv{AnnotationTemplateMetadata: `{"labels":{"tier":"db"},"annotations":{}}`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(1, parallel, "data=1Gi")
			w.optedIn = true
			pvc := w.pvcs["data-web-0"]
			for k, v := range tc.pvcLabels {
				pvc.Labels[k] = v
			}
			for k, v := range tc.pvcAnns {
				setAnnotation(pvc, k, v)
			}
			if tc.record != "" {
				setAnnotation(pvc, AnnotationTemplateMetadata, tc.record)
			}
			w.setTemplateMetadata("data", tc.tmplLabels, tc.tmplAnns)
			d := w.decide(t)
			if tc.wantNoPatch {
				expect(t, "patches", patches(d), nil)
				expect(t, "states", states(d, "data"), []string{string(Ready)})
				return
			}
			expect(t, "patches", patches(d), []string{"data-web-0:meta"})
			expect(t, "reasons", reasons(d, "data"), []string{ReasonApplyingTemplateMetadata})
			if p := d.Patches()[0]; p.ResourceVersion != "1" || p.Annotations[AnnotationStatefulSet] != testSTS {
				t.Errorf("patch %+v: want the observed resourceVersion and %s", p, AnnotationStatefulSet)
			}
			w.apply(d)
			if !reflect.DeepEqual(pvc.Labels, tc.wantLabels) {
				t.Errorf("labels %v, want %v", pvc.Labels, tc.wantLabels)
			}
			anns := map[string]string{}
			for k, v := range pvc.Annotations {
				if k != AnnotationStatefulSet {
					anns[k] = v
				}
			}
			if !reflect.DeepEqual(anns, tc.wantAnns) {
				t.Errorf("annotations %v, want %v", anns, tc.wantAnns)
			}
			d = w.decide(t)
			expect(t, "patches once applied", patches(d), nil)
			expect(t, "states once applied", states(d, "data"), []string{string(Ready)})
		})
	}
}

// A StatefulSet that did not opt in keeps its PVCs' metadata as it is,
// whatever its templates or our record say.
func TestRule15_OnlyOptedIn(t *testing.T) {
	w := newWorld(2, parallel, "data=1Gi")
	setAnnotation(w.pvcs["data-web-0"], AnnotationTemplateMetadata, `{"labels":{"app":"web"},"annotations":{}}`)
	w.setTemplateMetadata("data", map[string]string{"chart": "db-1.3"}, map[string]string{"note": "x"})
	d := w.decide(t)
	expect(t, "patches", patches(d), nil)
	expect(t, "states", states(d, "data"), repeat(string(Ready), 2))
	expectStatus(t, d, "data", 2, 0, w.sts.Generation)
}

// Metadata does not touch the volume: every replica's PVC that exists and is
// not being deleted gets it, whatever its pod (rule 1 is for volume changes)
// and its phase, and OrderedReady holds none back; an eligible replica's
// volume change and metadata go in one merge patch. A replica is Ready only
// once its PVC has the metadata.
func TestRule15_EveryReplicaAtOnceAndOnePatch(t *testing.T) {
	for _, policy := range policies {
		t.Run(string(policy), func(t *testing.T) {
			w := newWorld(5, policy, "data=1Gi")
			w.optedIn = true
			w.decide(t)
			delete(w.pods, "web-1")                                 // pod missing
			w.pvcs["data-web-2"].Status.Phase = corev1.ClaimPending // not bound
			w.pvcs["data-web-3"].DeletionTimestamp = &metav1.Time{} // being deleted
			delete(w.pvcs, "data-web-4")                            // missing
			w.setTemplateMetadata("data", map[string]string{"chart": "db-1.3"}, nil)
			w.setTemplate("data", "2Gi")
			d := w.decide(t)
			expect(t, "patches", patches(d), []string{"data-web-0:1Gi->2Gi meta", "data-web-1:meta", "data-web-2:meta"})
			want := []string{ReasonExpanding, ReasonPodMissing, ReasonPVCNotBound, ReasonPVCTerminating, ReasonPVCMissing}
			if policy == ordered {
				want = []string{ReasonExpanding, ReasonWaitingForPreviousReplica, ReasonWaitingForPreviousReplica, ReasonWaitingForPreviousReplica, ReasonWaitingForPreviousReplica}
			}
			expect(t, "reasons", reasons(d, "data"), want)
			p := d.Patches()[0]
			if p.ResourceVersion != "1" || p.Labels["chart"] != "db-1.3" || !p.Resizes() {
				t.Errorf("patch of replica 0 %+v: want the size and the label in one patch on resourceVersion 1", p)
			}
			if got, want := p.Describe(), "the request to 2Gi and the template's labels and annotations (set label chart)"; got != want {
				t.Errorf("Describe() = %q, want %q", got, want)
			}
			if msg := d.Templates[0].Replicas[1].Message; !strings.HasSuffix(msg, "; setting the template's labels and annotations (set label chart) on the PVC") {
				t.Errorf("replica 1 message %q", msg)
			}
			w.apply(d)
			w.finishResize("data-web-0")
			d = w.decide(t)
			expect(t, "patches once replica 0 is done", patches(d), nil)
			expect(t, "states", states(d, "data"), []string{string(Ready), string(Pending), string(Pending), string(Pending), string(Pending)})
		})
	}
}

// The ready count (so `wait`) covers the metadata: a volume that is done
// waits for its PVC's labels; a note (a request left above the template)
// is still said while they are set.
func TestRule15_ReadyOnlyWithTheMetadata(t *testing.T) {
	w := newWorld(2, parallel, "data=2Gi")
	w.optedIn = true
	w.decide(t)
	w.setTemplate("data", "1Gi") // PVCs left above: Ready, noted
	w.setTemplateMetadata("data", map[string]string{"chart": "db-1.3"}, nil)
	d := w.decide(t)
	expect(t, "reasons", reasons(d, "data"), repeat(ReasonApplyingTemplateMetadata, 2))
	expectStatus(t, d, "data", 0, 0, 1) // finished at 1, not at this generation
	if msg := d.Templates[0].Replicas[0].Message; !strings.Contains(msg, "setting the template's labels and annotations (set label chart) on the PVC; not lowering the request from 2Gi") {
		t.Errorf("message %q: want the metadata and the note", msg)
	}
	w.apply(d)
	d = w.decide(t)
	expect(t, "reasons once applied", reasons(d, "data"), repeat(ReasonNotRaisedByController, 2))
	expectStatus(t, d, "data", 2, 0, w.sts.Generation)
}

// A merged patch the apiserver refuses fails the replica, naming all it
// would have changed.
func TestRule15_RejectedPatch(t *testing.T) {
	w := newWorld(1, parallel, "data=1Gi")
	w.optedIn = true
	w.setTemplateMetadata("data", map[string]string{"chart": "db-1.3"}, map[string]string{"note": "x"})
	w.setTemplate("data", "2Gi")
	d := w.decide(t)
	d.RejectPatch("data-web-0", "admission webhook denied the request")
	rd := d.Templates[0].Replicas[0]
	want := "patching the request to 2Gi and the template's labels and annotations (set annotation note, label chart) failed: admission webhook denied the request"
	if rd.State != Failed || rd.Message != want {
		t.Errorf("replica %s %q, want Failed %q", rd.State, rd.Message, want)
	}
}

// Describe names at most maxDescribedKeys keys, sorted, and a record-only
// change as such.
func TestDescribeMetadata(t *testing.T) {
	labels := map[string]string{}
	for i := 0; i < 7; i++ {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	p := &PVCPatch{Labels: labels, RemoveAnnotations: []string{"old"}}
	if got, want := p.Describe(), "the template's labels and annotations (set label k0, label k1, label k2, label k3, label k4 and 2 more; remove annotation old)"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	p = &PVCPatch{RemoveAnnotations: []string{AnnotationTemplateMetadata}, Annotations: map[string]string{AnnotationStatefulSet: "web"}}
	if got, want := p.Describe(), "the record of the template's labels and annotations (csi-resizer.io/template-metadata)"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
}
