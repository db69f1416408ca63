package features

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/component-base/featuregate"
)

// TestOwnGates: the sidecar's own gates have external-resizer v2.2's maturity and defaults
// (its --help: AnnotateFsResize BETA true, ReleaseLeaderElectionOnExit ALPHA false; the GA
// ones are not listed there but accepted).
func TestOwnGates(t *testing.T) {
	g := NewGate()
	all := g.GetAll()
	for name, want := range map[featuregate.Feature]featuregate.FeatureSpec{
		RecoverVolumeExpansionFailure: {Default: true, PreRelease: featuregate.GA},
		AnnotateFsResize:              {Default: true, PreRelease: featuregate.Beta},
		VolumeAttributesClass:         {Default: true, PreRelease: featuregate.GA},
		ReleaseLeaderElectionOnExit:   {Default: false, PreRelease: featuregate.Alpha},
	} {
		got, ok := all[name]
		if !ok {
			t.Errorf("gate %s is not registered", name)
			continue
		}
		if got.Default != want.Default || got.PreRelease != want.PreRelease || got.LockToDefault {
			t.Errorf("gate %s = %+v, want default %t, %q, switchable", name, got, want.Default, want.PreRelease)
		}
		if g.Enabled(name) != want.Default {
			t.Errorf("gate %s enabled = %t by default, want %t", name, g.Enabled(name), want.Default)
		}
	}
	// GA gates can still be switched off, as in external-resizer.
	if err := g.SetFromMap(map[string]bool{string(RecoverVolumeExpansionFailure): false, string(VolumeAttributesClass): false}); err != nil {
		t.Fatalf("switching the GA gates off: %v", err)
	}
	if g.Enabled(RecoverVolumeExpansionFailure) || g.Enabled(VolumeAttributesClass) {
		t.Error("GA gates still on after being switched off")
	}
}

// TestSharedGates: the shared gates external-resizer's binary accepts are there (a sample from
// each registry: generic apiserver, zpages, metrics, featuregate's own), and --help lists the
// sidecar's GA gates, which featuregate hides.
func TestSharedGates(t *testing.T) {
	g := NewGate()
	all := g.GetAll()
	for _, name := range []featuregate.Feature{"AllAlpha", "AllBeta", "WatchList", "APIResponseCompression", "ComponentFlagz", "NativeHistograms"} {
		if _, ok := all[name]; !ok {
			t.Errorf("shared gate %s is not registered", name)
		}
	}
	help := Help(g)
	for _, line := range []string{
		"RecoverVolumeExpansionFailure=true|false (GA - default=true)",
		"VolumeAttributesClass=true|false (GA - default=true)",
		"ReleaseLeaderElectionOnExit=true|false (ALPHA - default=false)",
		"AnnotateFsResize=true|false (BETA - default=true)",
	} {
		if !slices.Contains(help, line) {
			t.Errorf("Help() lacks %q:\n%v", line, help)
		}
	}
}

// TestNewGateIsFresh: each gate is independent; setting one changes neither another nor the
// shared registry it is copied from.
func TestNewGateIsFresh(t *testing.T) {
	a, b := NewGate(), NewGate()
	if err := a.SetFromMap(map[string]bool{string(AnnotateFsResize): false, "WatchList": false}); err != nil {
		t.Fatal(err)
	}
	if !b.Enabled(AnnotateFsResize) || !b.Enabled("WatchList") {
		t.Error("setting gates on one gate changed another")
	}
	if !NewGate().Enabled("WatchList") {
		t.Error("setting gates on one gate changed the registry new gates are copied from")
	}
}

func TestVolumeAttributesClassServed(t *testing.T) {
	vac := metav1.APIResource{Name: "volumeattributesclasses", Kind: "VolumeAttributesClass"}
	sc := metav1.APIResource{Name: "storageclasses", Kind: "StorageClass"}
	for _, tc := range []struct {
		name      string
		resources []*metav1.APIResourceList
		fail      error
		want      bool
		wantErr   bool
	}{
		{name: "v1 serves it (1.34+)", resources: []*metav1.APIResourceList{{GroupVersion: "storage.k8s.io/v1", APIResources: []metav1.APIResource{sc, vac}}}, want: true},
		{name: "only v1beta1 serves it", resources: []*metav1.APIResourceList{
			{GroupVersion: "storage.k8s.io/v1", APIResources: []metav1.APIResource{sc}},
			{GroupVersion: "storage.k8s.io/v1beta1", APIResources: []metav1.APIResource{vac}},
		}},
		{name: "no storage.k8s.io/v1 at all", resources: nil},
		{name: "discovery fails", fail: errors.New("connection refused"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			d := client.Discovery().(*fakediscovery.FakeDiscovery)
			d.Resources = tc.resources
			if tc.fail != nil {
				d.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.fail })
			}
			got, err := VolumeAttributesClassServed(d)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want error: %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("served = %t, want %t", got, tc.want)
			}
		})
	}
}
