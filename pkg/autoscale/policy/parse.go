package policy

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Parse reads a PVC's settings from its annotations, its StorageClass's (sc may be nil) and
// the defaults. It returns ok=false when a value is bad: Settings.Problems name each one, and
// the PVC must be left alone. Only the value in effect is read: a pvc-autoresizer annotation
// that one of ours overrides is never checked.
func Parse(sc *storagev1.StorageClass, pvc *v1.PersistentVolumeClaim, d Defaults) (Settings, bool) {
	p := parser{sc: sc, pvc: pvc, obj: pvc.Namespace + "/" + pvc.Name}
	s := Settings{Object: p.obj}
	s.Enabled, s.Why = p.optIn(d.AllClasses)
	if !s.Enabled || len(p.problems) > 0 {
		s.Problems = p.problems
		return s, len(s.Problems) == 0
	}
	if why := p.expandable(); why != "" && len(p.problems) == 0 {
		s.Enabled, s.Why = false, why
		return s, true
	}
	s.Threshold = p.amount(d.Threshold, fixThresholdRange, thresholdOK, AnnThreshold, TopoLVMThreshold)
	s.InodesThreshold = p.percent(d.InodesThreshold, AnnInodesThreshold, TopoLVMInodesThreshold)
	s.Increase = p.amount(d.Increase, fixIncrease, increaseOK, AnnIncrease, TopoLVMIncrease)
	s.MinIncrease = p.bytes(d.MinIncrease, AnnMinIncrease)
	s.Limit, s.LimitFrom = p.limit(d.Limit)
	s.Cooldown = p.duration(d.Cooldown, AnnCooldown)
	s.ResizeWait = d.ResizeWait
	s.Siblings = p.boolean(d.Siblings, AnnSiblings)
	s.GroupBy = p.labelKey(TopoLVMGroupBy)
	s.Problems = p.problems
	if len(s.Problems) > 0 {
		return s, false
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == v1.PersistentVolumeBlock {
		s.Enabled, s.Why = false, "volumeMode Block: the kubelet reports no file system usage for it"
	} else if s.Limit == 0 {
		// pvc-autoresizer resizes no PVC without a limit; neither do we (docs/autoscaler.md).
		s.Enabled, s.Why = false, fmt.Sprintf("no limit: set annotation %s (or %s) on the PVC, or a default limit", AnnLimit, TopoLVMStorageLimit)
	}
	return s, true
}

// parser reads annotations in the order of precedence and collects the problems.
type parser struct {
	sc       *storagev1.StorageClass
	pvc      *v1.PersistentVolumeClaim
	obj      string
	problems []Problem
	// by is the annotation that opted the PVC in; empty key for AllClasses.
	by found
}

// found is one annotation in effect; class is the StorageClass's name when it is the class's.
type found struct {
	key, value, class string
}

// lookup returns the first annotation present of: ours on the PVC, pvc-autoresizer's (if any)
// on the PVC, ours on the StorageClass.
func (p *parser) lookup(ours, theirs string) (found, bool) {
	if v, ok := p.pvc.Annotations[ours]; ok {
		return found{key: ours, value: v}, true
	}
	if v, ok := p.pvc.Annotations[theirs]; ok && theirs != "" {
		return found{key: theirs, value: v}, true
	}
	if p.sc != nil {
		if v, ok := p.sc.Annotations[ours]; ok {
			return found{key: ours, value: v, class: p.sc.Name}, true
		}
	}
	return found{}, false
}

func (p *parser) problem(f found, fix string) {
	p.problems = append(p.problems, Problem{Annotation: f.key, Value: f.value, Object: p.obj, StorageClass: f.class, Fix: fix})
}

// optIn applies the opt-in rules: our key on the PVC decides ("false" opts out), then
// pvc-autoresizer's on the PVC, then ours on the class ("false" overrides theirs there), then
// theirs on the class, then --all-classes. pvc-autoresizer enables only on exactly "true", so
// any other value of its key is "not enabled", not a problem.
func (p *parser) optIn(all bool) (bool, string) {
	f := found{key: AnnAutoscale, value: p.pvc.Annotations[AnnAutoscale]}
	if on, ok := p.optInKey(f, p.pvc.Annotations); ok {
		return on, whyNot(on, "the PVC opts out ("+AnnAutoscale+"=false)")
	}
	if p.pvc.Annotations[TopoLVMEnabled] == "true" {
		p.by = found{key: TopoLVMEnabled, value: "true"}
		return true, ""
	}
	if p.sc != nil {
		f = found{key: AnnAutoscale, value: p.sc.Annotations[AnnAutoscale], class: p.sc.Name}
		if on, ok := p.optInKey(f, p.sc.Annotations); ok {
			return on, whyNot(on, fmt.Sprintf("StorageClass %s opts out (%s=false)", p.sc.Name, AnnAutoscale))
		}
		if p.sc.Annotations[TopoLVMEnabled] == "true" {
			p.by = found{key: TopoLVMEnabled, value: "true", class: p.sc.Name}
			return true, ""
		}
	}
	if all {
		return true, ""
	}
	return false, fmt.Sprintf("neither the PVC nor its StorageClass has %s or %s set to \"true\"", AnnAutoscale, TopoLVMEnabled)
}

func whyNot(on bool, why string) string {
	if on {
		return ""
	}
	return why
}

// optInKey reads our opt-in key: ok=false when it is absent from annotations. A bad value
// records a problem and answers "not opted in".
func (p *parser) optInKey(f found, annotations map[string]string) (on, ok bool) {
	if _, present := annotations[f.key]; !present {
		return false, false
	}
	switch f.value {
	case "true":
		p.by = f
		return true, true
	case "false":
		return false, true
	}
	p.problem(f, fixBool)
	return false, true
}

// expandable checks that the class allows volume expansion: the apiserver would refuse every
// resize otherwise. An annotation that opted the PVC in makes it a problem; a PVC opted in only
// by AllClasses is just not autoscaled (the returned reason).
func (p *parser) expandable() string {
	if p.sc == nil || p.sc.AllowVolumeExpansion != nil && *p.sc.AllowVolumeExpansion {
		return ""
	}
	why := fmt.Sprintf("StorageClass %s does not allow volume expansion", p.sc.Name)
	if p.by.key != "" {
		p.problem(p.by, why+": set allowVolumeExpansion: true on it, or remove the opt-in")
	}
	return why
}

func (p *parser) amount(def Amount, rangeFix string, valid func(Amount) bool, ours, theirs string) Amount {
	f, ok := p.lookup(ours, theirs)
	if !ok {
		return def
	}
	a, parsed := ParseAmount(f.value)
	switch {
	case !parsed:
		p.problem(f, fixAmount)
	case !valid(a):
		p.problem(f, rangeFix)
	default:
		return a
	}
	return def
}

func (p *parser) percent(def Percent, ours, theirs string) Percent {
	f, ok := p.lookup(ours, theirs)
	if !ok {
		return def
	}
	if v, parsed := ParsePercent(f.value); parsed && percentOK(v) {
		return v
	}
	p.problem(f, fixPercent)
	return def
}

func (p *parser) bytes(def int64, ours string) int64 {
	f, ok := p.lookup(ours, "")
	if !ok {
		return def
	}
	if v, parsed := ParseBytes(f.value); parsed {
		return v
	}
	p.problem(f, fixQuantity)
	return def
}

// limit returns the limit in effect and where it comes from. pvc-autoresizer's "0" (any zero
// quantity) means its annotation is ignored, as it documents: our class key or the default
// applies then.
func (p *parser) limit(def int64) (int64, string) {
	f, ok := p.lookup(AnnLimit, TopoLVMStorageLimit)
	if ok && f.key == TopoLVMStorageLimit && isZeroQuantity(f.value) {
		f, ok = p.lookupClass(AnnLimit)
	}
	if !ok {
		return def, "the default limit"
	}
	v, parsed := ParseBytes(f.value)
	if !parsed {
		fix := fixQuantity
		if f.key == TopoLVMStorageLimit {
			fix = fixTopoLVMLimit
		}
		p.problem(f, fix)
		return 0, ""
	}
	return v, f.describe()
}

// describe names the annotation and where it is, for sentences.
func (f found) describe() string {
	if f.class != "" {
		return fmt.Sprintf("StorageClass %s's annotation %s", f.class, f.key)
	}
	return "annotation " + f.key
}

func (p *parser) lookupClass(key string) (found, bool) {
	if p.sc == nil {
		return found{}, false
	}
	v, ok := p.sc.Annotations[key]
	return found{key: key, value: v, class: p.sc.Name}, ok
}

func (p *parser) duration(def time.Duration, ours string) time.Duration {
	f, ok := p.lookup(ours, "")
	if !ok {
		return def
	}
	if v, err := time.ParseDuration(f.value); err == nil && v >= 0 {
		return v
	}
	p.problem(f, fixDuration)
	return def
}

func (p *parser) boolean(def bool, ours string) bool {
	f, ok := p.lookup(ours, "")
	if !ok {
		return def
	}
	switch f.value {
	case "true":
		return true
	case "false":
		return false
	}
	p.problem(f, fixBool)
	return def
}

// labelKey reads pvc-autoresizer's grouping label key from the PVC.
func (p *parser) labelKey(theirs string) string {
	v, ok := p.pvc.Annotations[theirs]
	if !ok {
		return ""
	}
	if len(validation.IsQualifiedName(v)) > 0 {
		p.problem(found{key: theirs, value: v}, fixLabelKey)
		return ""
	}
	return v
}
