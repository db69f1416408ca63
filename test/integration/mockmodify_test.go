//go:build integration

package integration

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rcsi "github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// TestHarnessModifyVolume checks the mock driver's ControllerModifyVolume switch through the
// resizer's own CSI client (pkg/csi): hidden and UNIMPLEMENTED by default, a modify-only driver
// passes the handshake, an unknown volume is NOT_FOUND, a mutableParameter fault makes one
// class's parameters infeasible, and the calls log records the parameters.
func TestHarnessModifyVolume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	handshake := func(t *testing.T, d *framework.Driver) (rcsi.Driver, *rcsi.Client) {
		t.Helper()
		conn, err := connection.Connect(ctx, d.SocketPath, nil, connection.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		drv, err := rcsi.Handshake(ctx, conn, 10*time.Second)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		return drv, rcsi.NewClient(conn, 10*time.Second, 10*time.Second)
	}

	t.Run("off by default", func(t *testing.T) {
		d := framework.StartMockDriver(t, framework.MockDriverOptions{})
		drv, client := handshake(t, d)
		if drv.ControllerModify || !drv.ControllerExpand {
			t.Fatalf("default mock: %+v, want controller expansion without MODIFY_VOLUME", drv)
		}
		id, err := d.CreateVolume(ctx, "v", gi)
		if err != nil {
			t.Fatal(err)
		}
		if err := client.Modify(ctx, rcsi.ModifyRequest{VolumeID: id, MutableParameters: map[string]string{"iops": "1"}}); status.Code(err) != codes.Unimplemented {
			t.Fatalf("ControllerModifyVolume: %v, want UNIMPLEMENTED", err)
		}
	})

	t.Run("modify-only", func(t *testing.T) {
		d := framework.StartMockDriver(t, framework.MockDriverOptions{Name: "modify-only.csi-resizer.io", ModifyOnly: true})
		drv, client := handshake(t, d)
		if want := (rcsi.Driver{Name: "modify-only.csi-resizer.io", ControllerModify: true}); drv != want {
			t.Fatalf("handshake: %+v, want %+v", drv, want)
		}
		id, err := d.CreateVolume(ctx, "v", gi)
		if err != nil {
			t.Fatal(err)
		}
		d.SetFaults(t, []framework.Fault{{Method: "ControllerModifyVolume", Code: codes.InvalidArgument, Message: "no such tier", MutableParameter: "tier=platinum"}})
		gold := map[string]string{"tier": "gold", "iops": "3000"}
		if err := client.Modify(ctx, rcsi.ModifyRequest{VolumeID: id, MutableParameters: gold}); err != nil {
			t.Fatalf("modify to gold: %v", err)
		}
		if err := client.Modify(ctx, rcsi.ModifyRequest{VolumeID: id, MutableParameters: map[string]string{"tier": "platinum"}}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("modify to the faulted class: %v, want INVALID_ARGUMENT", err)
		}
		if err := client.Modify(ctx, rcsi.ModifyRequest{VolumeID: "no-such-volume", MutableParameters: gold}); status.Code(err) != codes.NotFound {
			t.Fatalf("modify of an unknown volume: %v, want NOT_FOUND", err)
		}
		calls := d.ModifyCalls(t, id)
		if len(calls) != 2 || calls[0].Code != codes.OK || !maps.Equal(calls[0].MutableParameters, gold) ||
			calls[1].Code != codes.InvalidArgument || !calls[1].Injected || calls[1].MutableParameters["tier"] != "platinum" {
			t.Fatalf("calls log: %+v", calls)
		}
	})
}
