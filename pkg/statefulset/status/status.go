// Package status defines the feedback that statefulset-resizer writes on a
// StatefulSet: the JSON document in the annotation
// csi-resizer.io/volume-claim-templates-status. It is the reliable channel a
// CI/CD job polls (events are best effort), so its shape is part of the
// product: {"observedGeneration":N,"templates":[{"templateName",
// "readyReplicas","finishedReconciliationGeneration","infeasibleReplicas",
// "message"}]} plus "uid", the metadata.uid of the StatefulSet it describes,
// and "recreateStep" ({"step","since","message"}) while a re-create is held
// back, refused or under way, and on the object it created.
package status

import (
	"encoding/json"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotation is the StatefulSet annotation that carries the JSON encoded
// VolumeClaimTemplates.
const Annotation = "csi-resizer.io/volume-claim-templates-status"

// VolumeClaimTemplates is the feedback for every volume claim template of one
// StatefulSet, as observed at ObservedGeneration.
type VolumeClaimTemplates struct {
	// ObservedGeneration is the StatefulSet metadata.generation the controller
	// evaluated when it wrote this document.
	ObservedGeneration int64 `json:"observedGeneration"`
	// UID is the metadata.uid of the StatefulSet the document was written
	// for. Annotations travel with manifests: a StatefulSet re-created from
	// `kubectl get -o yaml` (delete --cascade=orphan, edit, apply) is at
	// generation 1 like the old one and carries its document, which a
	// generation check alone would take for this object's ("finished at
	// generation 1") before any PVC was resized. The UID tells them apart.
	UID types.UID `json:"uid,omitempty"`
	// Desired is the value of the StatefulSet's desired-templates annotation
	// (csi-resizer.io/desired-volume-claim-templates) the document was
	// computed for; empty when there was none. The sizes it asks for are the
	// ones counted as ready.
	Desired string `json:"desiredVolumeClaimTemplates,omitempty"`
	// Recreate says that statefulset-resizer will replace the StatefulSet by
	// one with the desired templates once every replica is ready (its
	// --recreate), so the resize is not finished before that.
	Recreate bool `json:"recreate,omitempty"`
	// RecreateStep is where the re-create of this StatefulSet stands (held
	// back, refused, deleting) or, once it is done, that this object is the
	// re-created one; nil when no re-create was made or asked for.
	RecreateStep *RecreateStep `json:"recreateStep,omitempty"`
	// Templates has one entry per spec.volumeClaimTemplates entry, in spec order.
	Templates []Template `json:"templates"`
}

// Template is the reconciliation progress of one volume claim template.
type Template struct {
	// TemplateName is spec.volumeClaimTemplates[].metadata.name.
	TemplateName string `json:"templateName"`
	// ReadyReplicas counts the replicas whose PVC status.capacity is at least
	// the template's requested size (docs/design.md §3.5), including a PVC whose
	// request was left above the template (reported in Message).
	ReadyReplicas int32 `json:"readyReplicas"`
	// FinishedReconciliationGeneration is the last StatefulSet generation for
	// which every replica was ready. Zero (omitted) until that happens once.
	FinishedReconciliationGeneration int64 `json:"finishedReconciliationGeneration,omitempty"`
	// InfeasibleReplicas counts the replicas that cannot reach the template
	// size without a user action (driver said infeasible, patch rejected,
	// volume cannot shrink, ...).
	InfeasibleReplicas int32 `json:"infeasibleReplicas"`
	// Message explains the infeasible replicas (PVC names and driver
	// messages), then the replicas whose resize is failing and retried (not
	// infeasible), then the PVCs whose request is left above the template;
	// at most three, then "and N more".
	Message string `json:"message,omitempty"`
}

// Steps of a re-create as the status reports them (docs/design.md §3.7).
const (
	// StepHeldBack: a re-create is due but waits for a rollout to complete.
	StepHeldBack = "HeldBack"
	// StepRefused: the create of the replacement would be refused (a server
	// dry run said so), so nothing was deleted.
	StepRefused = "Refused"
	// StepDeleting: the record is stored and the object deleted with orphan
	// propagation; once the garbage collector has orphaned the pods it is
	// released and created again from the record.
	StepDeleting = "Deleting"
	// StepRecreated: this object is the re-created one.
	StepRecreated = "Recreated"
)

// RecreateStep is one step of a re-create, as written on the StatefulSet.
type RecreateStep struct {
	// Step is one of the Step* constants.
	Step string `json:"step"`
	// Since is when statefulset-resizer first saw the StatefulSet in this
	// step (RFC 3339, UTC).
	Since string `json:"since"`
	// Message says why, and what comes next or what to do.
	Message string `json:"message,omitempty"`
}

// Parse decodes the annotation value. An empty value is an error so callers
// can tell "never written" apart from "written": use FromStatefulSet for that.
func Parse(value string) (*VolumeClaimTemplates, error) {
	if value == "" {
		return nil, fmt.Errorf("empty %s annotation", Annotation)
	}
	var s VolumeClaimTemplates
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return nil, fmt.Errorf("decode %s annotation: %w", Annotation, err)
	}
	return &s, nil
}

// ErrOtherObject is wrapped by the error of FromStatefulSet when the stored
// document was written for another object than the StatefulSet it is on.
var ErrOtherObject = errors.New("written for another object")

// FromStatefulSet returns the status stored on sts, nil when the annotation is
// absent, and an error when it is present but cannot be decoded or was not
// written for this object (its uid differs from sts's, or is missing: see
// VolumeClaimTemplates.UID); that error wraps ErrOtherObject. Either way the
// document must be treated as absent: it says nothing about sts.
func FromStatefulSet(sts *appsv1.StatefulSet) (*VolumeClaimTemplates, error) {
	value, ok := sts.Annotations[Annotation]
	if !ok {
		return nil, nil
	}
	s, err := Parse(value)
	if err != nil {
		return nil, err
	}
	if s.UID != sts.UID {
		return nil, fmt.Errorf("%s annotation %w (uid %q, this StatefulSet has uid %q)", Annotation, ErrOtherObject, s.UID, sts.UID)
	}
	return s, nil
}

// Encode returns the annotation value. Templates is always encoded as an array
// (never null) so consumers can iterate without a nil check.
func (s VolumeClaimTemplates) Encode() (string, error) {
	if s.Templates == nil {
		s.Templates = []Template{}
	}
	data, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode %s annotation: %w", Annotation, err)
	}
	return string(data), nil
}

// Equal reports whether two documents say the same thing; the controller
// writes the annotation only when it is not Equal to the stored one.
func (s *VolumeClaimTemplates) Equal(other *VolumeClaimTemplates) bool {
	if s == nil || other == nil {
		return s == other
	}
	if s.ObservedGeneration != other.ObservedGeneration || s.UID != other.UID || s.Desired != other.Desired ||
		s.Recreate != other.Recreate || len(s.Templates) != len(other.Templates) {
		return false
	}
	if (s.RecreateStep == nil) != (other.RecreateStep == nil) || (s.RecreateStep != nil && *s.RecreateStep != *other.RecreateStep) {
		return false
	}
	for i := range s.Templates {
		if s.Templates[i] != other.Templates[i] {
			return false
		}
	}
	return true
}

// Template returns the entry for the named template, or nil.
func (s *VolumeClaimTemplates) Template(name string) *Template {
	if s == nil {
		return nil
	}
	for i := range s.Templates {
		if s.Templates[i].TemplateName == name {
			return &s.Templates[i]
		}
	}
	return nil
}
