// Package conditions reads and writes PersistentVolumeClaim conditions for the resizer's
// controllers (expansion and modification), which compute a whole new conditions list from the
// observed one and write it in a resourceVersion-guarded patch: each touches only its own
// condition types, so the other's survive.
package conditions

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Find returns the condition of type t, nil when absent. The pointer is into conds.
func Find(conds []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType) *v1.PersistentVolumeClaimCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

// LastSeen is when the condition was last set: the later of its lastProbeTime and its
// lastTransitionTime (a writer that records only the transition leaves the probe time zero).
func LastSeen(c *v1.PersistentVolumeClaimCondition) metav1.Time {
	if c.LastTransitionTime.After(c.LastProbeTime.Time) {
		return c.LastTransitionTime
	}
	return c.LastProbeTime
}

// Set sets a True condition. lastTransitionTime changes only when the condition was not
// already True, so it keeps saying when the situation began. lastProbeTime changes when the
// content changes, or on every call with probe (the error condition records each attempt); an
// unchanged condition is left alone so that repeating a step costs no write.
func Set(conds []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType, reason, message string, now metav1.Time, probe bool) []v1.PersistentVolumeClaimCondition {
	out := make([]v1.PersistentVolumeClaimCondition, 0, len(conds)+1)
	found := false
	for _, c := range conds {
		if c.Type == t {
			found = true
			changed := c.Status != v1.ConditionTrue || c.Reason != reason || c.Message != message
			if c.Status != v1.ConditionTrue {
				c.LastTransitionTime = now
			}
			if changed || probe {
				c.LastProbeTime = now
			}
			c.Status, c.Reason, c.Message = v1.ConditionTrue, reason, message
		}
		out = append(out, c)
	}
	if !found {
		out = append(out, v1.PersistentVolumeClaimCondition{Type: t, Status: v1.ConditionTrue, Reason: reason, Message: message, LastProbeTime: now, LastTransitionTime: now})
	}
	return out
}

// Remove returns conds without the condition of type t.
func Remove(conds []v1.PersistentVolumeClaimCondition, t v1.PersistentVolumeClaimConditionType) []v1.PersistentVolumeClaimCondition {
	var out []v1.PersistentVolumeClaimCondition
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}
