// Command mock-csi-driver serves Kubernetes' own e2e mock CSI driver
// (k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service) on a unix
// socket, for the csi-resizer integration tests.
//
// The mock already implements EXPAND_VOLUME, FAILED_PRECONDITION for offline
// expansion of a published volume and NOT_FOUND for unknown volume ids. This
// wrapper adds what the tests need on top, in one gRPC unary interceptor:
//
//   - fault injection: the JSON file given by --faults-file is re-read on every
//     call, so a test changes the driver's behaviour by rewriting that file
//     (see faults.go for the format);
//   - a calls log: one JSON line per call (--calls-log), so tests count the
//     calls the driver really received instead of trusting the caller;
//   - a state journal (--state-file): successful volume-changing calls are
//     recorded and replayed on start, so a restarted driver still knows the
//     volumes it created (the mock keeps them only in memory);
//   - switches for the expansion shapes of real drivers: controller expansion
//     off (with node expansion on: a "node-only" driver), node expansion
//     required in the ControllerExpandVolume response, offline-only expansion;
//   - a switch for ControllerModifyVolume (--modify-volume): the mock always
//     advertises MODIFY_VOLUME and answers OK, which would make every driver
//     of the tests a modifying one. With the switch off the capability is
//     hidden and the call is UNIMPLEMENTED; with it on an unknown volume id is
//     NOT_FOUND, as real drivers answer. With --controller-expansion=false
//     --node-expansion=false --modify-volume it is a modify-only driver (the
//     plugin VolumeExpansion capability, which the mock always advertises, is
//     then hidden too).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

type options struct {
	endpoint              string
	name                  string
	faultsFile            string
	callsLog              string
	stateFile             string
	controllerExpansion   bool
	nodeExpansion         bool
	nodeExpansionRequired bool
	offlineExpansion      bool
	disableAttach         bool
	modifyVolume          bool
}

func main() {
	var o options
	flag.StringVar(&o.endpoint, "endpoint", "", "CSI endpoint to serve, unix:///path/to/socket (required)")
	flag.StringVar(&o.name, "name", service.Name, "driver name returned by GetPluginInfo; also the mock's node id")
	flag.StringVar(&o.faultsFile, "faults-file", "", "JSON file with fault rules, re-read on every call; missing or empty file = no faults")
	flag.StringVar(&o.callsLog, "calls-log", "", "file to append one JSON line per gRPC call to")
	flag.StringVar(&o.stateFile, "state-file", "", "journal of volume-changing calls, replayed on start so a restarted driver keeps its volumes")
	flag.BoolVar(&o.controllerExpansion, "controller-expansion", true, "advertise controller EXPAND_VOLUME and serve ControllerExpandVolume (false: the call returns UNIMPLEMENTED)")
	flag.BoolVar(&o.nodeExpansion, "node-expansion", false, "advertise node EXPAND_VOLUME (with --controller-expansion=false this is a node-only driver)")
	flag.BoolVar(&o.nodeExpansionRequired, "node-expansion-required", false, "ControllerExpandVolume answers node_expansion_required=true (implies --node-expansion)")
	flag.BoolVar(&o.offlineExpansion, "offline-expansion", false, "advertise VolumeExpansion OFFLINE and fail ControllerExpandVolume with FAILED_PRECONDITION while the volume is controller-published")
	flag.BoolVar(&o.disableAttach, "disable-attach", false, "do not advertise PUBLISH_UNPUBLISH_VOLUME")
	flag.BoolVar(&o.modifyVolume, "modify-volume", false, "advertise controller MODIFY_VOLUME and serve ControllerModifyVolume (false: the capability is hidden and the call returns UNIMPLEMENTED)")
	flag.Parse()

	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "mock-csi-driver: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	sockPath, ok := strings.CutPrefix(o.endpoint, "unix://")
	if !ok || sockPath == "" {
		return fmt.Errorf("--endpoint must be unix:///path, got %q", o.endpoint)
	}

	svc := service.New(service.Config{
		DriverName:    o.name,
		DisableAttach: o.disableAttach,
		// The mock ties node EXPAND_VOLUME to NodeExpansionRequired; the
		// interceptor sets the response flag itself from --node-expansion-required.
		NodeExpansionRequired:      o.nodeExpansion || o.nodeExpansionRequired,
		DisableControllerExpansion: !o.controllerExpansion,
		DisableOnlineExpansion:     o.offlineExpansion,
		// Node calls get paths the tests invent; there is no real mount.
		PermissiveTargetPath: true,
	})

	w := &wrapper{opts: o, svc: svc, faults: &faultSet{path: o.faultsFile}}
	if o.callsLog != "" {
		f, err := os.OpenFile(o.callsLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open calls log: %w", err)
		}
		defer f.Close()
		w.callsLog = f
	}
	if o.stateFile != "" {
		n, err := replayJournal(o.stateFile, svc)
		if err != nil {
			return fmt.Errorf("replay state file %s: %w", o.stateFile, err)
		}
		if n > 0 {
			fmt.Fprintf(os.Stderr, "mock-csi-driver: replayed %d journaled calls from %s\n", n, o.stateFile)
		}
		f, err := os.OpenFile(o.stateFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open state file: %w", err)
		}
		defer f.Close()
		w.journal = f
	}

	// A socket left behind by a killed predecessor would make Listen fail.
	if err := os.Remove(sockPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", sockPath)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sockPath, err)
	}

	srv := grpc.NewServer(grpc.UnaryInterceptor(w.intercept))
	csi.RegisterIdentityServer(srv, svc)
	csi.RegisterControllerServer(srv, svc)
	csi.RegisterNodeServer(srv, svc)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		// Stop, not GracefulStop: clients should see the connection drop
		// the way they would when a driver container dies.
		srv.Stop()
	}()

	fmt.Fprintf(os.Stderr, "mock-csi-driver: serving %s as %q (controller-expansion=%v node-expansion=%v node-expansion-required=%v offline-expansion=%v modify-volume=%v)\n",
		o.endpoint, o.name, o.controllerExpansion, o.nodeExpansion || o.nodeExpansionRequired, o.nodeExpansionRequired, o.offlineExpansion, o.modifyVolume)
	err = srv.Serve(lis)
	_ = os.Remove(sockPath)
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// wrapper holds the interceptor's state around the mock service.
type wrapper struct {
	opts     options
	svc      service.Service
	faults   *faultSet
	callsLog *os.File
	journal  *os.File
}

func (w *wrapper) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := path.Base(info.FullMethod)
	start := time.Now()

	rule, faultErr := w.faults.match(method, req)
	if faultErr != nil {
		// A broken faults file is a test bug: fail the call loudly rather
		// than silently ignoring the rules the test meant to inject.
		err := status.Errorf(codes.Internal, "mock-csi-driver: faults file: %v", faultErr)
		w.logCall(method, start, req, nil, err, false)
		return nil, err
	}

	if rule != nil && rule.delay > 0 {
		// The delay runs to its end even when the client gives up, so a
		// delayed success really happens behind a timed-out caller, the
		// way a slow storage backend behaves (an "uncertain" expansion).
		t := time.NewTimer(rule.delay)
		<-t.C
	}

	var resp any
	var err error
	injected := false
	switch {
	case rule != nil && rule.code != codes.OK:
		injected = true
		err = status.Error(rule.code, rule.Message)
	case method == "ControllerExpandVolume" && !w.opts.controllerExpansion:
		// The mock serves the call even when it does not advertise the
		// capability; a real node-only driver would not.
		err = status.Error(codes.Unimplemented, "controller expansion is not supported by this driver")
	case method == "ControllerModifyVolume":
		resp, err = w.modifyVolume(ctx, req.(*csi.ControllerModifyVolumeRequest), handler)
	default:
		resp, err = w.callService(ctx, method, req, handler)
	}

	if err == nil {
		switch r := resp.(type) {
		case *csi.ControllerExpandVolumeResponse:
			r.NodeExpansionRequired = w.opts.nodeExpansionRequired
		case *csi.ControllerGetCapabilitiesResponse:
			if !w.opts.modifyVolume {
				r.Capabilities = withoutModify(r.Capabilities)
			}
		case *csi.GetPluginCapabilitiesResponse:
			if w.opts.noExpansion() {
				r.Capabilities = withoutVolumeExpansion(r.Capabilities)
			}
		}
		w.record(method, req)
	}
	w.logCall(method, start, req, resp, err, injected)
	return resp, err
}

// volMu serialises the calls that read or write the mock's exported
// MockVolumes map, so the fix-up below cannot race with the service.
var volMu sync.Mutex

// volumeCalls are the calls that touch service.MockVolumes.
var volumeCalls = map[string]bool{
	"CreateVolume": true, "DeleteVolume": true, "ControllerPublishVolume": true,
	"ControllerUnpublishVolume": true, "ControllerExpandVolume": true,
}

// callService runs the real handler, serialised for volume calls.
func (w *wrapper) callService(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	if !volumeCalls[method] {
		return handler(ctx, req)
	}
	volMu.Lock()
	defer volMu.Unlock()
	resp, err := handler(ctx, req)
	if err == nil {
		afterVolumeCall(method, req)
	}
	return resp, err
}

// afterVolumeCall fixes up what the mock service itself leaves wrong: its
// ControllerUnpublishVolume does not clear ISControllerPublished, so an
// offline-only volume would stay "published" (FAILED_PRECONDITION) forever.
// Callers hold volMu.
func afterVolumeCall(method string, req any) {
	if r, ok := req.(*csi.ControllerUnpublishVolumeRequest); ok && method == "ControllerUnpublishVolume" {
		if v, found := service.MockVolumes[r.GetVolumeId()]; found {
			v.ISControllerPublished = false
			service.MockVolumes[r.GetVolumeId()] = v
		}
	}
}

// modifyVolume serves ControllerModifyVolume. The mock's own handler answers OK
// for anything, even a volume it never created; a real driver answers
// NOT_FOUND, and a driver without MODIFY_VOLUME answers UNIMPLEMENTED.
func (w *wrapper) modifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest, handler grpc.UnaryHandler) (any, error) {
	if !w.opts.modifyVolume {
		return nil, status.Error(codes.Unimplemented, "volume modification is not supported by this driver (start it with --modify-volume)")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume id is required")
	}
	if _, err := w.svc.ControllerGetVolume(ctx, &csi.ControllerGetVolumeRequest{VolumeId: req.GetVolumeId()}); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// noExpansion: no expansion switch is on, the driver cannot expand at all.
func (o options) noExpansion() bool {
	return !o.controllerExpansion && !o.nodeExpansion && !o.nodeExpansionRequired && !o.offlineExpansion
}

// withoutVolumeExpansion drops the plugin VolumeExpansion capability.
func withoutVolumeExpansion(caps []*csi.PluginCapability) []*csi.PluginCapability {
	out := caps[:0:0]
	for _, c := range caps {
		if c.GetVolumeExpansion() == nil {
			out = append(out, c)
		}
	}
	return out
}

// withoutModify drops MODIFY_VOLUME from controller capabilities.
func withoutModify(caps []*csi.ControllerServiceCapability) []*csi.ControllerServiceCapability {
	out := caps[:0:0]
	for _, c := range caps {
		if c.GetRpc().GetType() != csi.ControllerServiceCapability_RPC_MODIFY_VOLUME {
			out = append(out, c)
		}
	}
	return out
}
