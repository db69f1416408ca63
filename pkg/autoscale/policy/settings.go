package policy

import (
	"errors"
	"fmt"
	"time"
)

// The annotations the autoscaler reads (docs/autoscaler.md, "Settings"). Ours take precedence
// over pvc-autoresizer's, which are read as that project documents them so that its users can
// switch without editing their objects.
const (
	// AnnAutoscale opts a StorageClass or a PVC in ("true"); "false" on a PVC opts it out of a
	// class that is opted in, on a class it overrides pvc-autoresizer's opt-in of the class.
	AnnAutoscale = "csi-resizer.io/autoscale"
	// AnnThreshold is the free-space threshold: a percent of the file system's capacity or a
	// quantity of free bytes.
	AnnThreshold = "csi-resizer.io/autoscale-threshold"
	// AnnInodesThreshold is the free-inodes threshold, a percent of the file system's inodes.
	AnnInodesThreshold = "csi-resizer.io/autoscale-inodes-threshold"
	// AnnIncrease is the step: a percent of the volume's size or a quantity.
	AnnIncrease = "csi-resizer.io/autoscale-increase"
	// AnnMinIncrease is the smallest step, a quantity.
	AnnMinIncrease = "csi-resizer.io/autoscale-min-increase"
	// AnnLimit is the largest request the autoscaler writes, a quantity.
	AnnLimit = "csi-resizer.io/autoscale-limit"
	// AnnCooldown is the least time between two resizes of one volume, a Go duration.
	AnnCooldown = "csi-resizer.io/autoscale-cooldown"
	// AnnSiblings turns sibling sizing of StatefulSet PVCs on or off ("true", "false").
	AnnSiblings = "csi-resizer.io/autoscale-siblings"

	// TopoLVMEnabled is pvc-autoresizer's opt-in of a StorageClass; it is also read on a PVC.
	TopoLVMEnabled = "resize.topolvm.io/enabled"
	// TopoLVMStorageLimit is pvc-autoresizer's limit; "0" means the annotation is ignored.
	TopoLVMStorageLimit = "resize.topolvm.io/storage_limit"
	// TopoLVMThreshold, TopoLVMInodesThreshold and TopoLVMIncrease are pvc-autoresizer's
	// threshold, inodes threshold and step, read on the PVC only.
	TopoLVMThreshold       = "resize.topolvm.io/threshold"
	TopoLVMInodesThreshold = "resize.topolvm.io/inodes-threshold"
	TopoLVMIncrease        = "resize.topolvm.io/increase"
	// TopoLVMGroupBy names a label whose value groups PVCs for the sibling size.
	TopoLVMGroupBy = "resize.topolvm.io/initial-resize-group-by"
)

// The fixes a Problem names, one per kind of value.
const (
	fixAmount          = `want a percent like "10%" or a quantity like "5Gi"`
	fixThresholdRange  = `want a percent above 0% and below 100% like "10%", or a quantity like "5Gi"`
	fixPercent         = `want a percent above 0% and below 100% like "10%"`
	fixIncrease        = `want a percent above 0% and at most 1000% like "10%", or a quantity like "1Gi"`
	fixQuantity        = `want a quantity above zero like "100Gi"`
	fixTopoLVMLimit    = `want a quantity like "100Gi" ("0" turns the limit off)`
	fixDuration        = `want a Go duration of zero or more like "10m" or "6h"`
	fixBool            = `want "true" or "false"`
	fixLabelKey        = `want a label key like "app.kubernetes.io/name"`
	maxIncreasePercent = Percent(1000 * 100)
)

// Problem is a bad annotation value: the caller turns it into an event on the PVC and leaves
// the PVC alone.
type Problem struct {
	// Annotation is the key and Value its value.
	Annotation, Value string
	// Object is the PVC's namespace/name.
	Object string
	// StorageClass is the class's name when the annotation is on the class, "" on the PVC.
	StorageClass string
	// Fix says what value is wanted.
	Fix string
}

// Error names the PVC, the annotation, where it is, its value and the fix.
func (p Problem) Error() string {
	where := "annotation"
	if p.StorageClass != "" {
		where = fmt.Sprintf("StorageClass %s's annotation", p.StorageClass)
	}
	return fmt.Sprintf("PVC %s: %s %s=%q: %s", p.Object, where, p.Annotation, p.Value, p.Fix)
}

// Defaults are the settings of a PVC that has no annotation for them; the command fills them
// from flags. NewDefaults gives the values docs/autoscaler.md explains.
type Defaults struct {
	// AllClasses opts every StorageClass in, as pvc-autoresizer's --no-annotation-check does.
	AllClasses      bool
	Threshold       Amount
	InodesThreshold Percent
	Increase        Amount
	MinIncrease     int64
	// Limit is the limit of a PVC without one; 0: none, and then such a PVC is not resized.
	Limit    int64
	Cooldown time.Duration
	// ResizeWait bounds the wait for the file system to grow after a resize.
	ResizeWait time.Duration
	Siblings   bool
}

// NewDefaults returns the defaults: pvc-autoresizer's documented 10% for the thresholds and
// the step, a 1Gi minimum step, no limit, a 10 minute cooldown, a 30 minute resize wait,
// sibling sizing on.
func NewDefaults() Defaults {
	return Defaults{
		Threshold:       PercentAmount(10 * 100),
		InodesThreshold: 10 * 100,
		Increase:        PercentAmount(10 * 100),
		MinIncrease:     1 << 30,
		Cooldown:        10 * time.Minute,
		ResizeWait:      30 * time.Minute,
		Siblings:        true,
	}
}

// Validate checks defaults the way annotations are checked, naming the setting.
func (d Defaults) Validate() error {
	var errs []error
	if !thresholdOK(d.Threshold) {
		errs = append(errs, fmt.Errorf("threshold %s: %s", d.Threshold, fixThresholdRange))
	}
	if !percentOK(d.InodesThreshold) {
		errs = append(errs, fmt.Errorf("inodes threshold %s: %s", d.InodesThreshold, fixPercent))
	}
	if !increaseOK(d.Increase) {
		errs = append(errs, fmt.Errorf("increase %s: %s", d.Increase, fixIncrease))
	}
	if d.MinIncrease < 0 || d.Limit < 0 {
		errs = append(errs, fmt.Errorf("min increase %d, limit %d: want zero or more bytes", d.MinIncrease, d.Limit))
	}
	if d.Cooldown < 0 || d.ResizeWait <= 0 {
		errs = append(errs, fmt.Errorf("cooldown %s, resize wait %s: want a cooldown of zero or more and a resize wait above zero", d.Cooldown, d.ResizeWait))
	}
	return errors.Join(errs...)
}

func percentOK(p Percent) bool { return p > 0 && p < 100*100 }

func thresholdOK(a Amount) bool {
	return !a.IsPercent && a.Bytes > 0 || a.IsPercent && percentOK(a.Percent)
}

func increaseOK(a Amount) bool {
	return !a.IsPercent && a.Bytes > 0 || a.IsPercent && a.Percent > 0 && a.Percent <= maxIncreasePercent
}

// Settings are one PVC's autoscaling settings.
type Settings struct {
	// Object is the PVC's namespace/name.
	Object string
	// Enabled: the PVC is opted in, has a limit and a file system. Why says why not.
	Enabled bool
	Why     string
	// Threshold is compared with the free bytes, InodesThreshold with the free inodes.
	Threshold       Amount
	InodesThreshold Percent
	// Increase and MinIncrease make the step: max(Increase of the size, MinIncrease).
	Increase    Amount
	MinIncrease int64
	// Limit is the largest request the autoscaler writes, in bytes; LimitFrom names its source.
	Limit     int64
	LimitFrom string
	// Cooldown is the least time between two resizes; ResizeWait bounds the wait for the file
	// system to grow after one.
	Cooldown, ResizeWait time.Duration
	// Siblings: raise a new replica's PVC to the size its siblings were grown to (SiblingSize).
	Siblings bool
	// GroupBy is pvc-autoresizer's grouping label key, "" when unset: the caller takes the
	// siblings from PVCs with the same value of this label.
	GroupBy string
	// Problems are the bad values found; Decide skips a PVC that has any.
	Problems []Problem
}
