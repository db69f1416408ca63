// Package csi is the resizer's only door to the CSI driver: it connects to the driver's unix
// socket, reads the driver's identity and capabilities once at start-up, and turns a PV into a
// ControllerExpandVolume call, or a PV and a VolumeAttributesClass into a ControllerModifyVolume
// call. It decides nothing about the state machines.
package csi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/accessmodes"
	"github.com/kubernetes-csi/csi-lib-utils/connection"
	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"github.com/kubernetes-csi/csi-lib-utils/rpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Driver is what the handshake learnt about the driver. It is read once: a driver's capabilities
// do not change while its socket stays up, and re-reading them before every expansion (as
// upstream does) doubles the CSI calls.
type Driver struct {
	Name string
	// ControllerExpand: controller EXPAND_VOLUME; ControllerExpandVolume is called.
	ControllerExpand bool
	// NodeExpand: the driver expands on the node (plugin VolumeExpansion capability or node
	// EXPAND_VOLUME). Alone, without ControllerExpand, it makes a "node-only" driver.
	NodeExpand bool
	// OfflineOnly: the plugin declares VolumeExpansion OFFLINE: the volume must not be in use
	// by a pod while it is expanded.
	OfflineOnly bool
	// SingleNodeMultiWriter: the controller understands the SINGLE_NODE_*_WRITER access modes.
	SingleNodeMultiWriter bool
	// ControllerModify: controller MODIFY_VOLUME; ControllerModifyVolume is called for
	// VolumeAttributesClass changes.
	ControllerModify bool
}

// NodeOnly reports whether the driver expands only on the node, so the control plane part is
// bookkeeping with no CSI call.
func (d Driver) NodeOnly() bool { return !d.ControllerExpand && d.NodeExpand }

// ErrNoExpansion is returned by Handshake for a driver that can neither expand volumes (on the
// controller or the node) nor modify them: the resizer would have nothing to do for it.
var ErrNoExpansion = errors.New("no expansion or modification capability")

// Connect dials the driver's socket. It fails at once with a *SocketPermissionError when the
// process may not connect to the socket, else when no connection is made within timeout, and
// exits the process when an established connection is lost: the driver restarted and may have
// lost its own state, and the cached capabilities may be stale (the same policy as upstream).
//
// csi-lib-utils logs "Still connecting" every 10s while it waits; that progress is moved to -v=2
// (its errors are not affected), so that at the default verbosity a driver that never comes up
// costs exactly one line on stderr, the error below, whatever --timeout is.
func Connect(ctx context.Context, address string, timeout time.Duration, mm csimetrics.CSIMetricsManager) (*grpc.ClientConn, error) {
	// A socket this process may not write fails at once, saying so: waiting out --timeout would
	// end in "no driver answered" and a crash loop that hides the cause.
	if err := checkSocketAccess(address); err != nil {
		return nil, err
	}
	dialCtx := klog.NewContext(ctx, klog.FromContext(ctx).V(2))
	conn, err := connection.Connect(dialCtx, address, mm,
		connection.WithTimeout(timeout),
		connection.OnConnectionLoss(connection.ExitOnConnectionLoss()))
	if err != nil {
		if perr := dialPermissionError(address); perr != nil {
			return nil, perr
		}
		return nil, fmt.Errorf("no CSI driver answered on --csi-address %s within --timeout %s (is the driver running and the socket volume mounted?): %w", address, timeout, err)
	}
	return conn, nil
}

// NewMetricsManager returns the metrics manager of the CSI calls of driver ("" before its name
// is known). The CSI replacement of an in-tree plugin gets the "migrated" label on its
// csi_sidecar_operations_seconds samples, as upstream gives it: "true" for calls about
// translated in-tree volumes (ExpandRequest.Migrated), "false" for the others.
func NewMetricsManager(driver string, migratedDriver bool) csimetrics.CSIMetricsManager {
	if migratedDriver {
		return csimetrics.NewCSIMetricsManagerWithOptions(driver, csimetrics.WithMigration())
	}
	return csimetrics.NewCSIMetricsManagerForSidecar(driver)
}

// Handshake waits for the driver to be ready and reads its identity and capabilities.
func Handshake(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) (Driver, error) {
	var d Driver
	if err := rpc.ProbeForever(ctx, conn, timeout); err != nil {
		return d, fmt.Errorf("probing the CSI driver: %w", err)
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	name, err := rpc.GetDriverName(callCtx, conn)
	if err != nil {
		return d, fmt.Errorf("GetPluginInfo: %w", err)
	}
	d.Name = name

	pluginCaps, err := csi.NewIdentityClient(conn).GetPluginCapabilities(callCtx, &csi.GetPluginCapabilitiesRequest{})
	if err != nil {
		return d, fmt.Errorf("GetPluginCapabilities of driver %s: %w", name, err)
	}
	hasControllerService := false
	for _, c := range pluginCaps.GetCapabilities() {
		if s := c.GetService(); s != nil && s.GetType() == csi.PluginCapability_Service_CONTROLLER_SERVICE {
			hasControllerService = true
		}
		if ve := c.GetVolumeExpansion(); ve != nil {
			switch ve.GetType() {
			case csi.PluginCapability_VolumeExpansion_ONLINE:
				d.NodeExpand = true
			case csi.PluginCapability_VolumeExpansion_OFFLINE:
				d.NodeExpand, d.OfflineOnly = true, true
			}
		}
	}
	if hasControllerService {
		ctrlCaps, err := rpc.GetControllerCapabilities(callCtx, conn)
		if err != nil {
			return d, fmt.Errorf("ControllerGetCapabilities of driver %s: %w", name, err)
		}
		d.ControllerExpand = ctrlCaps[csi.ControllerServiceCapability_RPC_EXPAND_VOLUME]
		d.SingleNodeMultiWriter = ctrlCaps[csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER]
		d.ControllerModify = ctrlCaps[csi.ControllerServiceCapability_RPC_MODIFY_VOLUME]
	}
	if !d.ControllerExpand {
		// A controller socket often serves the node service too (one binary); ask it, and
		// treat "not implemented" as "no".
		nodeCaps, err := csi.NewNodeClient(conn).NodeGetCapabilities(callCtx, &csi.NodeGetCapabilitiesRequest{})
		if err == nil {
			for _, c := range nodeCaps.GetCapabilities() {
				if r := c.GetRpc(); r != nil && r.GetType() == csi.NodeServiceCapability_RPC_EXPAND_VOLUME {
					d.NodeExpand = true
				}
			}
		} else if status.Code(err) != codes.Unimplemented {
			klog.FromContext(ctx).V(2).Info("NodeGetCapabilities failed; assuming no node expansion", "driver", name, "err", err)
		}
	}
	// A modify-only driver (VolumeAttributesClass changes, no expansion) is served.
	if !d.ControllerExpand && !d.NodeExpand && !d.ControllerModify {
		return d, fmt.Errorf("CSI driver %s can neither expand volumes (no controller EXPAND_VOLUME, node EXPAND_VOLUME or plugin VolumeExpansion capability) nor modify them (no controller MODIFY_VOLUME capability); does --csi-address point at the right driver?: %w", name, ErrNoExpansion)
	}
	return d, nil
}

// ExpandRequest is one ControllerExpandVolume call.
type ExpandRequest struct {
	VolumeID      string
	RequiredBytes int64
	Capability    *csi.VolumeCapability
	// Secrets are the controller-expand secrets. Never logged: csi-lib-utils' gRPC logging
	// strips fields marked csi_secret.
	Secrets map[string]string
	// Migrated: the volume is an in-tree PV translated to CSI. It sets the "migrated" label
	// of the call's csi_sidecar_operations_seconds sample when the metrics manager has it
	// (NewMetricsManager for a migrated driver), as upstream does.
	Migrated bool
}

// ExpandResult is the driver's answer.
type ExpandResult struct {
	CapacityBytes         int64
	NodeExpansionRequired bool
}

// Expander is the boundary the controller talks to; tests replace it.
type Expander interface {
	Expand(ctx context.Context, req ExpandRequest) (ExpandResult, error)
}

// Client implements Expander and Modifier over a gRPC connection, each call with its deadline.
type Client struct {
	conn *grpc.ClientConn
	// expandTimeout and modifyTimeout bound each ControllerExpandVolume and
	// ControllerModifyVolume call (--resize-timeout, --modify-timeout): a modification can
	// take far longer than an expansion on some backends, and one deadline for both would
	// cut the one or slow the retries of the other.
	expandTimeout, modifyTimeout time.Duration
}

// NewClient wraps a connection with the deadlines of the two calls.
func NewClient(conn *grpc.ClientConn, expandTimeout, modifyTimeout time.Duration) *Client {
	return &Client{conn: conn, expandTimeout: expandTimeout, modifyTimeout: modifyTimeout}
}

// Expand calls ControllerExpandVolume once. A driver that answers without a capacity is taken to
// have granted exactly what was asked.
func (c *Client) Expand(ctx context.Context, req ExpandRequest) (ExpandResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.expandTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, connection.AdditionalInfoKey, connection.AdditionalInfo{Migrated: strconv.FormatBool(req.Migrated)})
	rsp, err := csi.NewControllerClient(c.conn).ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{
		VolumeId:         req.VolumeID,
		CapacityRange:    &csi.CapacityRange{RequiredBytes: req.RequiredBytes},
		Secrets:          req.Secrets,
		VolumeCapability: req.Capability,
	})
	if err != nil {
		return ExpandResult{}, err
	}
	res := ExpandResult{CapacityBytes: rsp.GetCapacityBytes(), NodeExpansionRequired: rsp.GetNodeExpansionRequired()}
	if res.CapacityBytes <= 0 {
		res.CapacityBytes = req.RequiredBytes
	}
	return res, nil
}

// VolumeCapability describes how the PV is used, as ControllerExpandVolume wants it: block or
// mount (with fsType and mount flags) and the access mode.
func VolumeCapability(pv *v1.PersistentVolume, singleNodeMultiWriter bool) (*csi.VolumeCapability, error) {
	mode, err := accessmodes.ToCSIAccessMode(pv.Spec.AccessModes, singleNodeMultiWriter)
	if err != nil {
		return nil, fmt.Errorf("PV %s: %w", pv.Name, err)
	}
	vc := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		vc.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		return vc, nil
	}
	fsType := ""
	if pv.Spec.CSI != nil {
		fsType = pv.Spec.CSI.FSType
	}
	vc.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType, MountFlags: pv.Spec.MountOptions}}
	return vc, nil
}
