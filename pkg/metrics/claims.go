package metrics

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/csi-resizer/csi-resizer/pkg/internal/binding"
)

// ClaimLister returns the list function of NewStateCollector: the driver's PVCs
// (binding.VolumeOf) from the informer cache. It returns nil, which the collector exports as
// nothing at all, until the informers have synced (and on a standby replica, whose informers
// never start): a cache that is still listing would report the PVCs it has not reached yet as
// absent, and an infeasible PVC missing from one scrape after a restart resets the "for: 15m"
// of CSIResizerVolumeInfeasible. Once synced the result is never nil, even with no PVCs, so the
// collector exports its zeros. It serves expansion and modification alike, whichever of the
// two controllers runs. include keeps only some of the driver's volumes (--node-deployment: its
// node's); nil keeps them all.
func ClaimLister(driver string, pvcs corelisters.PersistentVolumeClaimLister, pvs corelisters.PersistentVolumeLister, include func(*v1.PersistentVolume) bool, synced ...cache.InformerSynced) func() []ClaimState {
	return func() []ClaimState {
		for _, s := range synced {
			if !s() {
				return nil
			}
		}
		all, err := pvcs.List(labels.Everything())
		if err != nil {
			return nil
		}
		out := make([]ClaimState, 0, len(all))
		for _, pvc := range all {
			if pv, ok := binding.VolumeOf(pvs, driver, pvc); ok && (include == nil || include(pv)) {
				out = append(out, NewClaimState(pvc))
			}
		}
		return out
	}
}
