package csi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/test/csitest"
)

// dial connects to the test driver without csi.Connect, which exits the process when the
// connection is lost.
func dial(t *testing.T, srv *csitest.Server) *grpc.ClientConn {
	t.Helper()
	conn, err := connection.Connect(context.Background(), srv.Address(), nil, connection.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatalf("connecting to %s: %v", srv.Address(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestHandshake(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    csitest.Options
		want    csi.Driver
		noExpan bool
	}{
		{
			name: "controller expansion",
			opts: csitest.Options{Name: "ctrl.example.com", ControllerService: true, ControllerExpand: true},
			want: csi.Driver{Name: "ctrl.example.com", ControllerExpand: true},
		},
		{
			name: "controller and online node expansion, SINGLE_NODE_MULTI_WRITER",
			opts: csitest.Options{Name: "both.example.com", ControllerService: true, ControllerExpand: true, SingleNodeMultiWriter: true,
				PluginExpansion: csispec.PluginCapability_VolumeExpansion_ONLINE},
			want: csi.Driver{Name: "both.example.com", ControllerExpand: true, NodeExpand: true, SingleNodeMultiWriter: true},
		},
		{
			name: "offline expansion",
			opts: csitest.Options{Name: "offline.example.com", ControllerService: true, ControllerExpand: true,
				PluginExpansion: csispec.PluginCapability_VolumeExpansion_OFFLINE},
			want: csi.Driver{Name: "offline.example.com", ControllerExpand: true, NodeExpand: true, OfflineOnly: true},
		},
		{
			name: "node-only by plugin capability, no controller service",
			opts: csitest.Options{Name: "node.example.com", PluginExpansion: csispec.PluginCapability_VolumeExpansion_ONLINE},
			want: csi.Driver{Name: "node.example.com", NodeExpand: true},
		},
		{
			name: "node-only by node EXPAND_VOLUME, controller service without EXPAND_VOLUME",
			opts: csitest.Options{Name: "node2.example.com", ControllerService: true, NodeService: true, NodeExpand: true},
			want: csi.Driver{Name: "node2.example.com", NodeExpand: true},
		},
		{
			name: "modify-only: MODIFY_VOLUME without any expansion capability",
			opts: csitest.Options{Name: "modify.example.com", ControllerService: true, ControllerModify: true, NodeService: true},
			want: csi.Driver{Name: "modify.example.com", ControllerModify: true},
		},
		{
			name: "controller expansion and MODIFY_VOLUME",
			opts: csitest.Options{Name: "ctrlmod.example.com", ControllerService: true, ControllerExpand: true, ControllerModify: true},
			want: csi.Driver{Name: "ctrlmod.example.com", ControllerExpand: true, ControllerModify: true},
		},
		{
			name:    "no expansion at all",
			opts:    csitest.Options{Name: "static.example.com", ControllerService: true, NodeService: true},
			noExpan: true,
		},
		{
			name:    "no expansion, no node service",
			opts:    csitest.Options{Name: "bare.example.com"},
			noExpan: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := csitest.Start(t, tc.opts)
			got, err := csi.Handshake(context.Background(), dial(t, srv), 5*time.Second)
			if tc.noExpan {
				if !errors.Is(err, csi.ErrNoExpansion) {
					t.Fatalf("Handshake error = %v, want one wrapping ErrNoExpansion", err)
				}
				for _, want := range []string{tc.opts.Name, "EXPAND_VOLUME", "MODIFY_VOLUME", "--csi-address"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %s", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Handshake: %v", err)
			}
			if got != tc.want {
				t.Errorf("Handshake = %+v, want %+v", got, tc.want)
			}
			if got.NodeOnly() != (tc.want.NodeExpand && !tc.want.ControllerExpand) {
				t.Errorf("NodeOnly() = %v for %+v", got.NodeOnly(), got)
			}
			wantCaps := 0
			if tc.opts.ControllerService {
				wantCaps = 1
			}
			if n := srv.Count(csitest.MethodControllerGetCapabilities); n != wantCaps {
				t.Errorf("ControllerGetCapabilities called %d times, want %d", n, wantCaps)
			}
			if n := srv.Count(csitest.MethodControllerExpandVolume) + srv.Count(csitest.MethodControllerModifyVolume); n != 0 {
				t.Errorf("the handshake called ControllerExpandVolume/ControllerModifyVolume %d times", n)
			}
		})
	}
}

func TestConnectMissingSocket(t *testing.T) {
	addr := t.TempDir() + "/missing.sock"
	start := time.Now()
	_, err := csi.Connect(context.Background(), addr, 500*time.Millisecond, nil)
	if err == nil {
		t.Fatal("Connect to a missing socket succeeded")
	}
	for _, want := range []string{addr, "--csi-address", "--timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Connect gave up after %s, want about the 500ms timeout", d)
	}
}

func pv(mutate func(*v1.PersistentVolume)) *v1.PersistentVolume {
	p := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv"},
		Spec: v1.PersistentVolumeSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: "d", VolumeHandle: "h", FSType: "xfs",
			}},
			MountOptions: []string{"noatime", "discard"},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	return p
}

func TestVolumeCapability(t *testing.T) {
	block := v1.PersistentVolumeBlock
	fs := v1.PersistentVolumeFilesystem
	modes := func(m ...v1.PersistentVolumeAccessMode) func(*v1.PersistentVolume) {
		return func(p *v1.PersistentVolume) { p.Spec.AccessModes = m }
	}
	for _, tc := range []struct {
		name      string
		pv        *v1.PersistentVolume
		snmw      bool
		wantBlock bool
		wantFS    string
		wantFlags []string
		wantMode  csispec.VolumeCapability_AccessMode_Mode
		wantErr   bool
	}{
		{name: "mount with fsType and options", pv: pv(nil), wantFS: "xfs", wantFlags: []string{"noatime", "discard"},
			wantMode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "explicit filesystem mode", pv: pv(func(p *v1.PersistentVolume) { p.Spec.VolumeMode = &fs }), wantFS: "xfs",
			wantFlags: []string{"noatime", "discard"}, wantMode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "mount without fsType", pv: pv(func(p *v1.PersistentVolume) { p.Spec.CSI.FSType = ""; p.Spec.MountOptions = nil }),
			wantMode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "block", pv: pv(func(p *v1.PersistentVolume) { p.Spec.VolumeMode = &block }), wantBlock: true,
			wantMode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "ReadWriteMany", pv: pv(modes(v1.ReadWriteMany)), wantFS: "xfs", wantFlags: []string{"noatime", "discard"},
			wantMode: csispec.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		{name: "ReadOnlyMany", pv: pv(modes(v1.ReadOnlyMany)), wantFS: "xfs", wantFlags: []string{"noatime", "discard"},
			wantMode: csispec.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		{name: "ReadWriteOncePod without SINGLE_NODE_MULTI_WRITER", pv: pv(modes(v1.ReadWriteOncePod)), wantFS: "xfs",
			wantFlags: []string{"noatime", "discard"}, wantMode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		{name: "ReadWriteOncePod with SINGLE_NODE_MULTI_WRITER", pv: pv(modes(v1.ReadWriteOncePod)), snmw: true, wantFS: "xfs",
			wantFlags: []string{"noatime", "discard"}, wantMode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER},
		{name: "ReadWriteOnce with SINGLE_NODE_MULTI_WRITER", pv: pv(nil), snmw: true, wantFS: "xfs",
			wantFlags: []string{"noatime", "discard"}, wantMode: csispec.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER},
		{name: "ReadOnlyMany with ReadWriteOnce", pv: pv(modes(v1.ReadOnlyMany, v1.ReadWriteOnce)), wantErr: true},
		{name: "no access mode", pv: pv(modes()), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := csi.VolumeCapability(tc.pv, tc.snmw)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("VolumeCapability = %v, want an error", got)
				}
				if !strings.Contains(err.Error(), tc.pv.Name) {
					t.Errorf("error %q does not name the PV", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m := got.GetAccessMode().GetMode(); m != tc.wantMode {
				t.Errorf("access mode = %s, want %s", m, tc.wantMode)
			}
			if tc.wantBlock {
				if got.GetBlock() == nil || got.GetMount() != nil {
					t.Errorf("capability = %v, want block", got)
				}
				return
			}
			mount := got.GetMount()
			if mount == nil {
				t.Fatalf("capability = %v, want mount", got)
			}
			if mount.GetFsType() != tc.wantFS || strings.Join(mount.GetMountFlags(), ",") != strings.Join(tc.wantFlags, ",") {
				t.Errorf("mount = fsType %q flags %q, want %q %q", mount.GetFsType(), mount.GetMountFlags(), tc.wantFS, tc.wantFlags)
			}
		})
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	srv := csitest.Start(t, csitest.ControllerDriver())
	conn := dial(t, srv)
	client := csi.NewClient(conn, 2*time.Second, 2*time.Second)
	capability, err := csi.VolumeCapability(pv(nil), false)
	if err != nil {
		t.Fatal(err)
	}
	req := csi.ExpandRequest{VolumeID: "vol-1", RequiredBytes: 3 << 30, Capability: capability, Secrets: map[string]string{"user": "u", "password": "p"}}

	t.Run("request and answer", func(t *testing.T) {
		srv.Queue(csitest.Response{Code: codes.OK, Capacity: 4 << 30, NodeExpansionRequired: true})
		res, err := client.Expand(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.CapacityBytes != 4<<30 || !res.NodeExpansionRequired {
			t.Errorf("result = %+v, want 4Gi with node expansion", res)
		}
		calls := srv.ExpandCalls()
		got := calls[len(calls)-1].Request
		if got.GetVolumeId() != "vol-1" || got.GetCapacityRange().GetRequiredBytes() != 3<<30 || got.GetCapacityRange().GetLimitBytes() != 0 {
			t.Errorf("request = %v", got)
		}
		if got.GetSecrets()["user"] != "u" || got.GetSecrets()["password"] != "p" || len(got.GetSecrets()) != 2 {
			t.Errorf("secrets = %v", got.GetSecrets())
		}
		if got.GetVolumeCapability().GetMount().GetFsType() != "xfs" {
			t.Errorf("capability = %v", got.GetVolumeCapability())
		}
	})
	t.Run("no capacity in the answer means granted", func(t *testing.T) {
		srv.Queue(csitest.Response{Code: codes.OK})
		res, err := client.Expand(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.CapacityBytes != 3<<30 || res.NodeExpansionRequired {
			t.Errorf("result = %+v, want the required 3Gi", res)
		}
	})
	t.Run("error keeps its gRPC status", func(t *testing.T) {
		srv.Queue(csitest.Fail(codes.OutOfRange, "too big"))
		_, err := client.Expand(context.Background(), req)
		if st, ok := status.FromError(err); !ok || st.Code() != codes.OutOfRange || st.Message() != "too big" {
			t.Errorf("error = %v, want OutOfRange \"too big\"", err)
		}
	})
	t.Run("driver slower than the timeout", func(t *testing.T) {
		srv.Queue(csitest.Response{Code: codes.OK, Grant: true, Delay: 10 * time.Second})
		start := time.Now()
		_, err := client.Expand(context.Background(), req)
		if status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("error = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d < 2*time.Second || d > 5*time.Second {
			t.Errorf("the call took %s, want the 2s timeout", d)
		}
	})
}

// TestMigratedLabel: for the CSI replacement of an in-tree plugin, each ControllerExpandVolume
// sample says whether it was about a translated in-tree volume, as upstream's do.
func TestMigratedLabel(t *testing.T) {
	t.Parallel()
	srv := csitest.Start(t, csitest.ControllerDriver())
	mm := csi.NewMetricsManager("ebs.csi.aws.com", true)
	conn, err := csi.Connect(context.Background(), srv.Address(), 10*time.Second, mm)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := csi.NewClient(conn, 2*time.Second, 2*time.Second)
	for _, migrated := range []bool{true, true, false} {
		srv.Queue(csitest.Response{Code: codes.OK})
		if _, err := client.Expand(context.Background(), csi.ExpandRequest{VolumeID: "vol-1", RequiredBytes: 1 << 30, Migrated: migrated}); err != nil {
			t.Fatal(err)
		}
	}
	families, err := mm.GetRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "csi_sidecar_operations_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method_name"] == "/csi.v1.Controller/ControllerExpandVolume" {
				counts[labels["migrated"]] += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if counts["true"] != 2 || counts["false"] != 1 || len(counts) != 2 {
		t.Errorf("ControllerExpandVolume samples by migrated label = %v, want true:2 false:1", counts)
	}

	plain := csi.NewMetricsManager("hostpath.csi.k8s.io", false)
	if plain.HaveAdditionalLabel("migrated") {
		t.Error("a driver that replaces no in-tree plugin has the migrated label")
	}
}
