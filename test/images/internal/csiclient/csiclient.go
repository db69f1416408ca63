// Package csiclient is what the stand-in sidecars of this module share: a connection to the CSI
// driver's unix socket and the driver's name.
package csiclient

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial connects lazily to the driver at address ("/csi/csi.sock" or "unix:///csi/csi.sock").
func Dial(address string) (*grpc.ClientConn, error) {
	target := address
	if !strings.HasPrefix(target, "unix:") {
		target = "unix://" + target
	}
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// WaitForDriverName asks the driver for its name until it answers (the driver container may
// start after the sidecar), logging each failure, and returns the name.
func WaitForDriverName(ctx context.Context, conn *grpc.ClientConn, address string) (string, error) {
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			if info.GetName() == "" {
				return "", fmt.Errorf("the driver at %s answered GetPluginInfo with an empty name", address)
			}
			return info.GetName(), nil
		}
		log.Printf("waiting for the CSI driver at %s: %v", address, err)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
