// Package csitest is an in-process CSI driver for tests: the Identity, Controller and (optionally)
// Node services on a real unix socket, with ControllerExpandVolume and ControllerModifyVolume
// answers programmed per call and a log of every call with its time.
package csitest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gRPC method names, as logged by the server.
const (
	MethodProbe                     = "/csi.v1.Identity/Probe"
	MethodGetPluginInfo             = "/csi.v1.Identity/GetPluginInfo"
	MethodGetPluginCapabilities     = "/csi.v1.Identity/GetPluginCapabilities"
	MethodControllerGetCapabilities = "/csi.v1.Controller/ControllerGetCapabilities"
	MethodControllerExpandVolume    = "/csi.v1.Controller/ControllerExpandVolume"
	MethodControllerModifyVolume    = "/csi.v1.Controller/ControllerModifyVolume"
	MethodNodeGetCapabilities       = "/csi.v1.Node/NodeGetCapabilities"
)

// Options describe the driver.
type Options struct {
	// Name is the driver name (GetPluginInfo); "csitest.example.com" when empty.
	Name string
	// ControllerService advertises the CONTROLLER_SERVICE plugin capability.
	ControllerService bool
	// ControllerExpand advertises the controller EXPAND_VOLUME capability.
	ControllerExpand bool
	// ControllerModify advertises the controller MODIFY_VOLUME capability and serves
	// ControllerModifyVolume (otherwise the call is UNIMPLEMENTED).
	ControllerModify bool
	// SingleNodeMultiWriter advertises the controller SINGLE_NODE_MULTI_WRITER capability.
	SingleNodeMultiWriter bool
	// PluginExpansion is the plugin VolumeExpansion capability; UNKNOWN advertises none.
	PluginExpansion csi.PluginCapability_VolumeExpansion_Type
	// NodeService registers the Node service; NodeExpand makes it advertise EXPAND_VOLUME.
	NodeService bool
	NodeExpand  bool
}

// ControllerDriver is a driver with controller expansion, the common case.
func ControllerDriver() Options {
	return Options{ControllerService: true, ControllerExpand: true}
}

// Response is the programmed answer to one ControllerExpandVolume or ControllerModifyVolume
// call (a modification uses only Code, Message and Delay).
type Response struct {
	// Code is the gRPC code; codes.OK answers with a ControllerExpandVolumeResponse.
	Code    codes.Code
	Message string
	// Grant answers with capacity_bytes = the request's required_bytes. Otherwise Capacity is
	// returned as it is (0 = the driver did not say).
	Grant    bool
	Capacity int64
	// NodeExpansionRequired is returned with a successful answer.
	NodeExpansionRequired bool
	// Delay is waited before answering (cut short when the caller gives up).
	Delay time.Duration
}

// Granted is a successful answer with the requested size.
var Granted = Response{Code: codes.OK, Grant: true}

// Fail is an error answer.
func Fail(code codes.Code, message string) Response { return Response{Code: code, Message: message} }

// Call is one logged gRPC call.
type Call struct {
	Method string
	At     time.Time
}

// ExpandCall is one ControllerExpandVolume call and the answer it got.
type ExpandCall struct {
	At       time.Time
	Request  *csi.ControllerExpandVolumeRequest
	Response Response
}

// ModifyCall is one ControllerModifyVolume call (volume id, mutable parameters, secrets) and the
// answer it got.
type ModifyCall struct {
	At       time.Time
	Request  *csi.ControllerModifyVolumeRequest
	Response Response
}

// Server is a running fake driver.
type Server struct {
	opts Options
	dir  string
	path string
	srv  *grpc.Server

	mu       sync.Mutex
	queue    []Response
	def      Response
	calls    []Call
	expands  []ExpandCall
	mqueue   []Response
	mdef     Response
	modifies []ModifyCall
	notifyCh chan struct{} // closed and replaced at every expand or modify call
}

// Start serves a driver on a new unix socket until the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "csitest.example.com"
	}
	// A short directory: unix socket paths are limited to 108 bytes, and t.TempDir() names
	// can be longer than that.
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{opts: opts, dir: dir, path: filepath.Join(dir, "csi.sock"), def: Granted, mdef: Response{Code: codes.OK}, notifyCh: make(chan struct{})}
	lis, err := net.Listen("unix", s.path)
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("listening on %s: %v", s.path, err)
	}
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(s.log))
	csi.RegisterIdentityServer(s.srv, identity{s: s})
	csi.RegisterControllerServer(s.srv, controller{s: s})
	if opts.NodeService {
		csi.RegisterNodeServer(s.srv, node{s: s})
	}
	go func() { _ = s.srv.Serve(lis) }()
	t.Cleanup(func() {
		s.srv.Stop()
		_ = os.RemoveAll(dir)
	})
	return s
}

// Address is the socket path.
func (s *Server) Address() string { return s.path }

// Name is the driver name.
func (s *Server) Name() string { return s.opts.Name }

// Queue programs the answers of the next ControllerExpandVolume calls, one per call in order.
func (s *Server) Queue(rs ...Response) {
	s.mu.Lock()
	s.queue = append(s.queue, rs...)
	s.mu.Unlock()
}

// SetDefault sets the answer used when the queue is empty (Granted at start).
func (s *Server) SetDefault(r Response) {
	s.mu.Lock()
	s.def = r
	s.mu.Unlock()
}

// QueueModify programs the answers of the next ControllerModifyVolume calls, one per call in
// order.
func (s *Server) QueueModify(rs ...Response) {
	s.mu.Lock()
	s.mqueue = append(s.mqueue, rs...)
	s.mu.Unlock()
}

// SetModifyDefault sets the ControllerModifyVolume answer used when its queue is empty (OK at
// start).
func (s *Server) SetModifyDefault(r Response) {
	s.mu.Lock()
	s.mdef = r
	s.mu.Unlock()
}

// Calls returns every call so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Count returns how many calls of method were made.
func (s *Server) Count(method string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Method == method {
			n++
		}
	}
	return n
}

// ExpandCalls returns the ControllerExpandVolume calls so far.
func (s *Server) ExpandCalls() []ExpandCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ExpandCall(nil), s.expands...)
}

// WaitForExpandCalls waits until at least n ControllerExpandVolume calls were made, and fails
// the test when that does not happen within timeout.
func (s *Server) WaitForExpandCalls(t testing.TB, n int, timeout time.Duration) []ExpandCall {
	t.Helper()
	return waitForCalls(t, s, func() []ExpandCall { return append([]ExpandCall(nil), s.expands...) }, "ControllerExpandVolume", n, timeout)
}

// ModifyCalls returns the ControllerModifyVolume calls so far.
func (s *Server) ModifyCalls() []ModifyCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ModifyCall(nil), s.modifies...)
}

// WaitForModifyCalls waits until at least n ControllerModifyVolume calls were made, and fails
// the test when that does not happen within timeout.
func (s *Server) WaitForModifyCalls(t testing.TB, n int, timeout time.Duration) []ModifyCall {
	t.Helper()
	return waitForCalls(t, s, func() []ModifyCall { return append([]ModifyCall(nil), s.modifies...) }, "ControllerModifyVolume", n, timeout)
}

// waitForCalls waits until snapshot (taken under s.mu) has at least n calls of method.
func waitForCalls[C any](t testing.TB, s *Server, snapshot func() []C, method string, n int, timeout time.Duration) []C {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		calls, ch := snapshot(), s.notifyCh
		s.mu.Unlock()
		if len(calls) >= n {
			return calls
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("waited %s for %d %s calls, got %d", timeout, n, method, len(calls))
		}
	}
}

func (s *Server) log(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	s.mu.Lock()
	s.calls = append(s.calls, Call{Method: info.FullMethod, At: time.Now()})
	s.mu.Unlock()
	return handler(ctx, req)
}

func (s *Server) expand(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	s.mu.Lock()
	r := s.def
	if len(s.queue) > 0 {
		r, s.queue = s.queue[0], s.queue[1:]
	}
	s.expands = append(s.expands, ExpandCall{At: time.Now(), Request: req, Response: r})
	close(s.notifyCh)
	s.notifyCh = make(chan struct{})
	s.mu.Unlock()

	if err := answer(ctx, r); err != nil {
		return nil, err
	}
	capacity := r.Capacity
	if r.Grant {
		capacity = req.GetCapacityRange().GetRequiredBytes()
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: capacity, NodeExpansionRequired: r.NodeExpansionRequired}, nil
}

func (s *Server) modify(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	s.mu.Lock()
	r := s.mdef
	if len(s.mqueue) > 0 {
		r, s.mqueue = s.mqueue[0], s.mqueue[1:]
	}
	s.modifies = append(s.modifies, ModifyCall{At: time.Now(), Request: req, Response: r})
	close(s.notifyCh)
	s.notifyCh = make(chan struct{})
	s.mu.Unlock()

	if err := answer(ctx, r); err != nil {
		return nil, err
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// answer waits r.Delay (cut short when the caller gives up) and returns r's error, if any.
func answer(ctx context.Context, r Response) error {
	if r.Delay > 0 {
		t := time.NewTimer(r.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	if r.Code != codes.OK {
		return status.Error(r.Code, r.Message)
	}
	return nil
}

type identity struct {
	csi.UnimplementedIdentityServer
	s *Server
}

func (i identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.s.opts.Name, VendorVersion: "test"}, nil
}

func (i identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (i identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	var caps []*csi.PluginCapability
	if i.s.opts.ControllerService {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	if t := i.s.opts.PluginExpansion; t != csi.PluginCapability_VolumeExpansion_UNKNOWN {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: t}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

type controller struct {
	csi.UnimplementedControllerServer
	s *Server
}

func (c controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpc := func(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
		return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}}
	}
	caps := []*csi.ControllerServiceCapability{rpc(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)}
	if c.s.opts.ControllerExpand {
		caps = append(caps, rpc(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME))
	}
	if c.s.opts.SingleNodeMultiWriter {
		caps = append(caps, rpc(csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER))
	}
	if c.s.opts.ControllerModify {
		caps = append(caps, rpc(csi.ControllerServiceCapability_RPC_MODIFY_VOLUME))
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (c controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if !c.s.opts.ControllerExpand {
		return nil, status.Error(codes.Unimplemented, "ControllerExpandVolume is not supported")
	}
	return c.s.expand(ctx, req)
}

func (c controller) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	if !c.s.opts.ControllerModify {
		return nil, status.Error(codes.Unimplemented, "ControllerModifyVolume is not supported")
	}
	return c.s.modify(ctx, req)
}

type node struct {
	csi.UnimplementedNodeServer
	s *Server
}

func (n node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	if n.s.opts.NodeExpand {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: csi.NodeServiceCapability_RPC_EXPAND_VOLUME}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}
