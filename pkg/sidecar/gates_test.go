package sidecar

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/features"
)

// parse parses args as the binary does, on a fresh flag set.
func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	saved := flag.CommandLine
	flag.CommandLine = flag.NewFlagSet("test-global", flag.ContinueOnError)
	t.Cleanup(func() { flag.CommandLine = saved })
	fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	o := AddFlags(fs)
	return o, fs.Parse(args)
}

// TestFeatureGatesFlag: --feature-gates takes key=value pairs, repeated flags add up, and the
// values reach the gate when ApplyFeatureGates runs (after logging is set up), marked as set
// explicitly; a gate nobody declares fails the parse with its name.
func TestFeatureGatesFlag(t *testing.T) {
	o, err := parse(t, "--feature-gates=AnnotateFsResize=false,VolumeAttributesClass=true", "--feature-gates=ReleaseLeaderElectionOnExit=true")
	if err != nil {
		t.Fatal(err)
	}
	if !o.FeatureGates.Enabled(features.AnnotateFsResize) {
		t.Error("AnnotateFsResize off before ApplyFeatureGates: the values must wait for logging")
	}
	if err := o.ApplyFeatureGates(); err != nil {
		t.Fatal(err)
	}
	g := o.FeatureGates
	if g.Enabled(features.AnnotateFsResize) || !g.Enabled(features.ReleaseLeaderElectionOnExit) || !g.Enabled(features.VolumeAttributesClass) {
		t.Errorf("AnnotateFsResize=%t ReleaseLeaderElectionOnExit=%t VolumeAttributesClass=%t, want false, true, true",
			g.Enabled(features.AnnotateFsResize), g.Enabled(features.ReleaseLeaderElectionOnExit), g.Enabled(features.VolumeAttributesClass))
	}
	if !g.ExplicitlySet(features.VolumeAttributesClass) || g.ExplicitlySet(features.RecoverVolumeExpansionFailure) {
		t.Error("ExplicitlySet: want VolumeAttributesClass only")
	}

	for _, tc := range []struct {
		arg  string
		want []string
	}{
		{"--feature-gates=NoSuchGate=true", []string{"feature-gates", "NoSuchGate"}},
		{"--feature-gates=AnnotateFsResize=true,Zzz=false,Aaa=true", []string{"feature-gates", "Aaa, Zzz"}},
		{"--feature-gates=AnnotateFsResize=maybe", []string{"feature-gates", "AnnotateFsResize", "maybe"}},
		{"--feature-gates=AnnotateFsResize", []string{"feature-gates", "malformed"}},
	} {
		_, err := parse(t, tc.arg)
		if err == nil {
			t.Errorf("%s: parsed, want an error", tc.arg)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %q", tc.arg, err, w)
			}
		}
	}
}

// TestLoggingFlagsInvalid: a logging configuration component-base refuses is one line naming
// the flags, not component-base's configuration fields. (Only refused configurations: a valid
// one would be applied to this test process.)
func TestLoggingFlagsInvalid(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--log-text-split-stream"}, []string{"--log-text-split-stream", "LoggingAlphaOptions"}},
		{[]string{"--log-json-info-buffer-size=1Mi"}, []string{"--log-json-info-buffer-size", "LoggingAlphaOptions"}},
		{[]string{"--logging-format=xml"}, []string{"--logging-format", "xml"}},
		{[]string{"--logging-format=json", "--vmodule=controller=5"}, []string{"--vmodule", "text"}},
		{[]string{"--log-flush-frequency=0s"}, []string{"--log-flush-frequency"}},
		{[]string{"--log-text-split-stream", "--logging-format=xml"}, []string{"--log-text-split-stream", "--logging-format", "; "}},
	} {
		o, err := parse(t, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err = o.Logging.Apply()
		if err == nil {
			t.Fatalf("%v: Logging.Apply() = nil, want an error", tc.args)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not name %q", tc.args, err, w)
			}
		}
		if strings.ContainsAny(err.Error(), "\r\n") || strings.Contains(err.Error(), "options.") {
			t.Errorf("%v: error %q, want one line naming flags, not configuration fields", tc.args, err)
		}
	}
}

func TestVolumeAttributesClassDecision(t *testing.T) {
	modifier := csi.Driver{Name: "hostpath.csi.k8s.io", ControllerModify: true}
	expander := csi.Driver{Name: "hostpath.csi.k8s.io", ControllerExpand: true}
	for _, tc := range []struct {
		name             string
		explicit, served bool
		err              error
		driver           csi.Driver
		wantOn           bool
		want             string
	}{
		{name: "default, served", served: true, driver: modifier, wantOn: true, want: "modification on"},
		{name: "default, not served", driver: modifier, want: "does not serve storage.k8s.io/v1 VolumeAttributesClass"},
		{name: "default, discovery failed", err: errors.New("boom"), driver: modifier, wantOn: true, want: "modification on"},
		{name: "set explicitly (not asked)", explicit: true, driver: modifier, wantOn: true, want: "modification on"},
		{name: "served, driver without MODIFY_VOLUME", served: true, driver: expander, want: "does not advertise the MODIFY_VOLUME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on, msg := volumeAttributesClassDecision(tc.explicit, tc.served, tc.err, tc.driver)
			if on != tc.wantOn {
				t.Errorf("on = %t, want %t", on, tc.wantOn)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("message %q does not say %q", msg, tc.want)
			}
		})
	}
}

// TestCheckVolumeAttributesClass: one log line in every case where the gate is on, the gate
// switched off only when it was left at its default and discovery says v1 is not served, and no
// discovery call at all when the gate was set explicitly.
func TestCheckVolumeAttributesClass(t *testing.T) {
	v1WithVAC := &metav1.APIResourceList{GroupVersion: "storage.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "volumeattributesclasses", Kind: "VolumeAttributesClass"}}}
	for _, tc := range []struct {
		name      string
		gates     []string
		resources []*metav1.APIResourceList
		fail      bool
		wantOn    bool
		wantLines int
		wantCalls int
	}{
		{name: "default, served", resources: []*metav1.APIResourceList{v1WithVAC}, wantOn: true, wantLines: 1, wantCalls: 1},
		{name: "default, not served", wantOn: false, wantLines: 1, wantCalls: 1},
		{name: "default, discovery fails", fail: true, wantOn: true, wantLines: 1, wantCalls: 1},
		{name: "explicitly on, not served", gates: []string{"--feature-gates=VolumeAttributesClass=true"}, wantOn: true, wantLines: 1},
		{name: "explicitly off", gates: []string{"--feature-gates=VolumeAttributesClass=false"}, wantOn: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, tc.gates...)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.ApplyFeatureGates(); err != nil {
				t.Fatal(err)
			}
			d := fake.NewClientset().Discovery().(*fakediscovery.FakeDiscovery)
			d.Resources = tc.resources
			if tc.fail {
				d.PrependReactor("get", "resource", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("connection refused")
				})
			}
			var lines []string
			logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
			on := checkVolumeAttributesClass(logger, d, o.FeatureGates, csi.Driver{Name: "d", ControllerModify: true})
			if on != tc.wantOn {
				t.Errorf("modification on = %t, want %t", on, tc.wantOn)
			}
			if got := o.FeatureGates.Enabled(features.VolumeAttributesClass); got != tc.wantOn {
				t.Errorf("VolumeAttributesClass = %t after the check, want %t", got, tc.wantOn)
			}
			if len(lines) != tc.wantLines {
				t.Errorf("logged %d lines, want %d: %q", len(lines), tc.wantLines, lines)
			}
			if n := len(d.Actions()); n != tc.wantCalls {
				t.Errorf("%d discovery calls, want %d", n, tc.wantCalls)
			}
		})
	}
}
