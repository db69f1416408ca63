package policy

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// SiblingSize is what a new replica is raised to (docs/autoscaler.md, "Siblings"): the largest
// size the autoscaler grew one of pvc's siblings to at or before pvc's creation. A sibling counts
// only when its record says the autoscaler wrote the request it has now (a size a person or the
// template gave it was not "grown to"), and only for a PVC created after that write: a replica
// that existed when its sibling grew is not new and keeps its own size, so one volume crossing
// its threshold is one resize, not one per replica. Nil when no sibling counts.
func SiblingSize(pvc *v1.PersistentVolumeClaim, siblings []*v1.PersistentVolumeClaim) *resource.Quantity {
	created := pvc.CreationTimestamp.Time
	var largest *resource.Quantity
	for _, s := range siblings {
		if s.Name == pvc.Name && s.Namespace == pvc.Namespace {
			continue
		}
		request, ok := s.Spec.Resources.Requests[v1.ResourceStorage]
		// A size not above the best so far cannot change the answer: no record to parse (a
		// sync of every replica of a large StatefulSet walks its grown siblings).
		if !ok || (largest != nil && request.Cmp(*largest) <= 0) {
			continue
		}
		r, problem := ParseRecord(s)
		if r == nil || problem != nil || r.To.Cmp(request) != 0 || created.Before(r.Time) {
			continue
		}
		q := request.DeepCopy()
		largest = &q
	}
	return largest
}

// siblingWant raises a PVC the autoscaler never resized (a new replica) to SiblingSize.
func siblingWant(s Settings, sibling *resource.Quantity, last *Record, base int64) (want, bool) {
	if !s.Siblings || sibling == nil || last != nil {
		return want{}, false
	}
	m := bytesOf(*sibling)
	if m <= base {
		return want{}, false
	}
	return want{to: m, reason: ReasonSiblings, why: fmt.Sprintf("a new replica: its siblings were grown to %s, above its %s", qstr(m), qstr(base))}, true
}
