package plan

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// AnnotationTemplateMetadata is the PVC annotation that records the template
// labels and annotations this controller set on the PVC, as the JSON
// {"labels":{k:v},"annotations":{k:v}} (docs/design.md §3.11 rule 15). It is
// the only proof that a key on the PVC came from the template: a key the
// template drops is removed only when the record holds it with the PVC's
// value, so a key set by anyone else, or changed since, is never removed.
const AnnotationTemplateMetadata = "csi-resizer.io/template-metadata"

// ReasonApplyingTemplateMetadata: the volume is done, and the template's
// labels and annotations are being set on the PVC.
const ReasonApplyingTemplateMetadata = "ApplyingTemplateMetadata"

// ownPrefix is the prefix of every key this project writes.
const ownPrefix = "csi-resizer.io/"

// reservedPrefixes and reservedKeys are the label and annotation keys that
// template metadata never sets or removes on a PVC (docs/design.md §3.11):
// this controller's own bookkeeping, which a template must not be able to
// forge (a forged pre-resize-storage would let it lower a person's request, a
// forged record remove a person's keys); the annotations the storage system
// writes on PVCs and reads back (binding, provisioner, selected node,
// resizer, the deprecated storage-class annotation); and kubectl's record of
// the PVC's own last applied manifest, which a template's value would corrupt.
var (
	reservedPrefixes = []string{ownPrefix, "volume.kubernetes.io/", "volume.beta.kubernetes.io/",
		"volume.alpha.kubernetes.io/", "pv.kubernetes.io/"}
	reservedKeys = map[string]bool{corev1.LastAppliedConfigAnnotation: true}
)

// reservedKey reports whether template metadata must leave key alone.
func reservedKey(key string) bool {
	if reservedKeys[key] {
		return true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// metadataRecord is the value of AnnotationTemplateMetadata.
type metadataRecord struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// readRecord parses the PVC's record. One that cannot be parsed is taken as
// empty: its keys are then forgotten, never removed (the safe side), and
// the record is rewritten.
func readRecord(pvc *corev1.PersistentVolumeClaim) metadataRecord {
	var r metadataRecord
	if value, ok := pvc.Annotations[AnnotationTemplateMetadata]; ok && json.Unmarshal([]byte(value), &r) != nil {
		return metadataRecord{}
	}
	return r
}

// keyChanges is what template metadata changes in one map of a PVC.
type keyChanges struct {
	set    map[string]string
	remove []string
	record map[string]string // the keys this controller set, after the patch
}

// reconcileKeys applies docs/design.md §3.11 rule 15 to one map (labels or
// annotations): every template key is set where the PVC's value differs,
// and recorded; a recorded key the PVC still has at our value stays
// recorded; a recorded key the template dropped is removed when the PVC
// still has the recorded value, and forgotten either way. A key the PVC had
// at the template's value before we set it is not ours and is not recorded.
func reconcileKeys(want, have, recorded map[string]string) keyChanges {
	c := keyChanges{set: map[string]string{}, record: map[string]string{}}
	for k, v := range want {
		if reservedKey(k) {
			continue
		}
		cur, ok := have[k]
		if was, ours := recorded[k]; !ok || cur != v || (ours && was == cur) {
			c.record[k] = v
		}
		if !ok || cur != v {
			c.set[k] = v
		}
	}
	for k, v := range recorded {
		if _, kept := want[k]; kept || reservedKey(k) {
			continue
		}
		if cur, ok := have[k]; ok && cur == v {
			c.remove = append(c.remove, k)
		}
	}
	sort.Strings(c.remove)
	return c
}

// metadataPatch is the patch that gives the PVC the template's labels and
// annotations (docs/design.md §3.11 rule 15), or nil when it has them and
// its record is current.
func metadataPatch(stsName string, pvc, tmpl *corev1.PersistentVolumeClaim) *PVCPatch {
	recorded := readRecord(pvc)
	labels := reconcileKeys(tmpl.Labels, pvc.Labels, recorded.Labels)
	annotations := reconcileKeys(tmpl.Annotations, pvc.Annotations, recorded.Annotations)
	p := &PVCPatch{
		Namespace: pvc.Namespace, Name: pvc.Name, ResourceVersion: pvc.ResourceVersion,
		RemoveLabels: labels.remove, RemoveAnnotations: annotations.remove,
		Annotations: annotations.set,
	}
	if len(labels.set) > 0 {
		p.Labels = labels.set
	}
	current, present := pvc.Annotations[AnnotationTemplateMetadata]
	record := metadataRecord{Labels: labels.record, Annotations: annotations.record}
	value, _ := json.Marshal(record) // maps of strings: cannot fail
	switch {
	case len(record.Labels)+len(record.Annotations) == 0 && present:
		p.RemoveAnnotations = append(p.RemoveAnnotations, AnnotationTemplateMetadata)
	case len(record.Labels)+len(record.Annotations) > 0 && current != string(value):
		p.Annotations[AnnotationTemplateMetadata] = string(value)
	}
	if len(p.Labels)+len(p.RemoveLabels)+len(p.Annotations)+len(p.RemoveAnnotations) == 0 {
		return nil
	}
	p.Annotations[AnnotationStatefulSet] = stsName
	return p
}

// withMetadata adds the template's labels and annotations to a replica's
// decision, for an opted-in StatefulSet (docs/design.md §3.11 rule 15): for
// every PVC that exists and is not being deleted, whether or not its pod is
// eligible (metadata does not touch the volume), in the same merge patch as
// the volume's change. A replica whose volume is done is Ready only once its
// PVC has the metadata.
func withMetadata(rd ReplicaDecision, stsName string, pvc, tmpl *corev1.PersistentVolumeClaim) ReplicaDecision {
	if pvc == nil || pvc.DeletionTimestamp != nil {
		return rd
	}
	p := metadataPatch(stsName, pvc, tmpl)
	if p == nil {
		return rd
	}
	rd.Patch = mergePatches(rd.Patch, p)
	what := "setting " + p.describeMetadata() + " on the PVC"
	if rd.State != Ready {
		rd.Message += "; " + what
		return rd
	}
	note := rd.Message
	rd = rd.pending(ReasonApplyingTemplateMetadata, "%s", what)
	if rd.Event != nil {
		// A note (a request left above the template): keep saying it.
		rd.Message += "; " + note
	}
	return rd
}

// maxDescribedKeys bounds the keys describeMetadata names, for a chart
// with many labels.
const maxDescribedKeys = 5

// describeMetadata says what a patch changes in the template's labels and
// annotations, "" when nothing: "the template's labels and annotations (set
// label app, annotation note; remove label old)". The patch's annotations
// outside ownPrefix are the template's (the reserved keys are never
// template metadata).
func (p *PVCPatch) describeMetadata() string {
	var set, remove []string
	for k := range p.Labels {
		set = append(set, "label "+k)
	}
	for k := range p.Annotations {
		if !strings.HasPrefix(k, ownPrefix) {
			set = append(set, "annotation "+k)
		}
	}
	for _, k := range p.RemoveLabels {
		remove = append(remove, "label "+k)
	}
	_, recorded := p.Annotations[AnnotationTemplateMetadata]
	for _, k := range p.RemoveAnnotations {
		recorded = recorded || k == AnnotationTemplateMetadata
		if !strings.HasPrefix(k, ownPrefix) {
			remove = append(remove, "annotation "+k)
		}
	}
	var parts []string
	for _, list := range []struct {
		verb string
		keys []string
	}{{"set", set}, {"remove", remove}} {
		if len(list.keys) > 0 {
			parts = append(parts, list.verb+" "+joinBounded(list.keys))
		}
	}
	switch {
	case len(parts) > 0:
		return fmt.Sprintf("the template's labels and annotations (%s)", strings.Join(parts, "; "))
	case recorded:
		return "the record of the template's labels and annotations (" + AnnotationTemplateMetadata + ")"
	}
	return ""
}

// joinBounded joins the sorted keys, at most maxDescribedKeys of them.
func joinBounded(keys []string) string {
	sort.Strings(keys)
	if len(keys) > maxDescribedKeys {
		return fmt.Sprintf("%s and %d more", strings.Join(keys[:maxDescribedKeys], ", "), len(keys)-maxDescribedKeys)
	}
	return strings.Join(keys, ", ")
}
