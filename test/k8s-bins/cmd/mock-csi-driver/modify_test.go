package main

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

// call runs one request through the interceptor the way the gRPC server does.
func call(t *testing.T, w *wrapper, method string, req any, h grpc.UnaryHandler) (any, error) {
	t.Helper()
	return w.intercept(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/" + method}, h)
}

func hasModify(resp any) bool {
	for _, c := range resp.(*csi.ControllerGetCapabilitiesResponse).GetCapabilities() {
		if c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_MODIFY_VOLUME {
			return true
		}
	}
	return false
}

func TestModifyVolumeSwitch(t *testing.T) {
	svc := service.New(service.Config{DriverName: "mock.test"})
	ctx := context.Background()
	vol, err := svc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	caps := func(ctx context.Context, req any) (any, error) {
		return svc.ControllerGetCapabilities(ctx, req.(*csi.ControllerGetCapabilitiesRequest))
	}
	modify := func(ctx context.Context, req any) (any, error) {
		return svc.ControllerModifyVolume(ctx, req.(*csi.ControllerModifyVolumeRequest))
	}
	req := func(id string) *csi.ControllerModifyVolumeRequest {
		return &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: map[string]string{"iops": "3000"}}
	}

	off := &wrapper{opts: options{}, svc: svc, faults: &faultSet{}}
	resp, err := call(t, off, "ControllerGetCapabilities", &csi.ControllerGetCapabilitiesRequest{}, caps)
	if err != nil || hasModify(resp) {
		t.Errorf("--modify-volume=false: capabilities %v, %v; want no MODIFY_VOLUME", resp, err)
	}
	if _, err := call(t, off, "ControllerModifyVolume", req(vol.GetVolume().GetVolumeId()), modify); status.Code(err) != codes.Unimplemented {
		t.Errorf("--modify-volume=false: ControllerModifyVolume error %v, want UNIMPLEMENTED", err)
	}

	on := &wrapper{opts: options{modifyVolume: true}, svc: svc, faults: &faultSet{}}
	resp, err = call(t, on, "ControllerGetCapabilities", &csi.ControllerGetCapabilitiesRequest{}, caps)
	if err != nil || !hasModify(resp) {
		t.Errorf("--modify-volume: capabilities %v, %v; want MODIFY_VOLUME", resp, err)
	}
	if _, err := call(t, on, "ControllerModifyVolume", req(vol.GetVolume().GetVolumeId()), modify); err != nil {
		t.Errorf("--modify-volume: ControllerModifyVolume of a known volume: %v", err)
	}
	if _, err := call(t, on, "ControllerModifyVolume", req("no-such-volume"), modify); status.Code(err) != codes.NotFound {
		t.Errorf("--modify-volume: ControllerModifyVolume of an unknown volume: %v, want NOT_FOUND", err)
	}
}

func TestNoExpansionHidesPluginVolumeExpansion(t *testing.T) {
	svc := service.New(service.Config{DriverName: "mock.test"})
	pluginCaps := func(ctx context.Context, req any) (any, error) {
		return svc.GetPluginCapabilities(ctx, req.(*csi.GetPluginCapabilitiesRequest))
	}
	hasExpansion := func(o options) bool {
		w := &wrapper{opts: o, svc: svc, faults: &faultSet{}}
		resp, err := w.intercept(context.Background(), &csi.GetPluginCapabilitiesRequest{},
			&grpc.UnaryServerInfo{FullMethod: "/csi.v1.Identity/GetPluginCapabilities"}, pluginCaps)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range resp.(*csi.GetPluginCapabilitiesResponse).GetCapabilities() {
			found = found || c.GetVolumeExpansion() != nil
		}
		return found
	}
	if hasExpansion(options{modifyVolume: true}) {
		t.Error("no expansion switch on (modify-only): plugin VolumeExpansion still advertised")
	}
	for _, o := range []options{{controllerExpansion: true}, {nodeExpansion: true}, {nodeExpansionRequired: true}, {offlineExpansion: true}} {
		if !hasExpansion(o) {
			t.Errorf("%+v: plugin VolumeExpansion hidden", o)
		}
	}
}
