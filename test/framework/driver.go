package framework

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// Environment variables that point the tests at a real CSI driver instead of
// the mock (see DriverFromEnv).
const (
	// EnvDriverCmd is a shell command line that starts a CSI driver; the
	// placeholder {endpoint} is replaced by unix:///path/to/socket and
	// {statedir} by a directory of the driver's own, kept across its restarts
	// and removed when the test ends. E.g.
	// `hostpathplugin --endpoint={endpoint} --nodeid=node-1 --statedir={statedir}`.
	EnvDriverCmd = "E2E_DRIVER_CMD"
	// EnvDriverEndpoint is the endpoint (unix:///path or a path) of a driver
	// that is already running.
	EnvDriverEndpoint = "E2E_DRIVER_ENDPOINT"
	// EnvDriverName is the driver name to expect; when empty it is read
	// with GetPluginInfo.
	EnvDriverName = "E2E_DRIVER_NAME"
)

// DefaultMockDriverName is the mock driver's name when MockDriverOptions.Name
// is empty.
const DefaultMockDriverName = "mock.csi-resizer.io"

// MockDriverOptions selects the mock driver's shape.
type MockDriverOptions struct {
	Name string // driver name (GetPluginInfo); default DefaultMockDriverName
	// NodeOnly: no controller EXPAND_VOLUME (ControllerExpandVolume answers
	// UNIMPLEMENTED), node EXPAND_VOLUME advertised.
	NodeOnly bool
	// NodeExpansionRequired: ControllerExpandVolume answers
	// node_expansion_required=true (and node EXPAND_VOLUME is advertised).
	NodeExpansionRequired bool
	// OfflineExpansion: PluginCapability VolumeExpansion OFFLINE, and
	// ControllerExpandVolume fails with FAILED_PRECONDITION while the volume
	// is controller-published (see Driver.PublishVolume).
	OfflineExpansion bool
	// DisableAttach: no PUBLISH_UNPUBLISH_VOLUME capability.
	DisableAttach bool
	// ModifyVolume: controller MODIFY_VOLUME advertised and
	// ControllerModifyVolume served (otherwise it answers UNIMPLEMENTED).
	ModifyVolume bool
	// ModifyOnly: a driver that modifies volumes but cannot expand them, on
	// the controller or the node (implies ModifyVolume; NodeOnly and
	// NodeExpansionRequired are then ignored).
	ModifyOnly bool
	// Faults are in place before the first call.
	Faults []Fault
	// ExtraArgs go to the mock-csi-driver command line.
	ExtraArgs []string
}

// Driver is a CSI driver process (or an already running driver) on a unix
// socket.
type Driver struct {
	Name       string   // driver name from GetPluginInfo
	Endpoint   string   // unix:///path/to/socket
	SocketPath string   // the path part of Endpoint
	Process    *Process // nil for an already running external driver

	mock       bool
	faultsFile string
	callsLog   string
}

// driverReadyTimeout bounds the wait for the socket to answer Probe.
const driverReadyTimeout = 60 * time.Second

// StartMockDriver starts the mock CSI driver (test/k8s-bins/cmd/mock-csi-driver)
// on a unix socket in a short temp dir and waits until it answers. It keeps a
// calls log, a faults file and a state journal, so Restart keeps its volumes.
func StartMockDriver(t testing.TB, opts MockDriverOptions) *Driver {
	t.Helper()
	if opts.Name == "" {
		opts.Name = DefaultMockDriverName
	}
	sockDir := shortTempDir(t)
	dir := t.TempDir()
	d := &Driver{
		Name:       opts.Name,
		SocketPath: filepath.Join(sockDir, "csi.sock"),
		mock:       true,
		faultsFile: filepath.Join(dir, "faults.json"),
		callsLog:   filepath.Join(dir, "calls.jsonl"),
	}
	d.Endpoint = "unix://" + d.SocketPath
	if len(opts.Faults) > 0 {
		d.SetFaults(t, opts.Faults)
	}
	args := []string{
		"--endpoint=" + d.Endpoint,
		"--name=" + opts.Name,
		"--faults-file=" + d.faultsFile,
		"--calls-log=" + d.callsLog,
		"--state-file=" + filepath.Join(dir, "state.jsonl"),
		fmt.Sprintf("--controller-expansion=%v", !opts.NodeOnly && !opts.ModifyOnly),
		fmt.Sprintf("--node-expansion=%v", (opts.NodeOnly || opts.NodeExpansionRequired) && !opts.ModifyOnly),
		fmt.Sprintf("--node-expansion-required=%v", opts.NodeExpansionRequired && !opts.ModifyOnly),
		fmt.Sprintf("--offline-expansion=%v", opts.OfflineExpansion),
		fmt.Sprintf("--disable-attach=%v", opts.DisableAttach),
		fmt.Sprintf("--modify-volume=%v", opts.ModifyVolume || opts.ModifyOnly),
	}
	d.Process = StartProcess(t, "mock-csi-driver", Bin(t, "mock-csi-driver"), append(args, opts.ExtraArgs...)...)
	d.waitReady(t)
	return d
}

// ExternalDriverOptions describes a real CSI driver.
type ExternalDriverOptions struct {
	// Command is a shell command line with the {endpoint} placeholder (and
	// optionally {statedir}, see EnvDriverCmd); the framework picks the socket
	// and the directory and starts the command.
	Command string
	// Endpoint of a driver that is already running (used when Command is
	// empty).
	Endpoint string
	// Name is the expected driver name; empty = whatever GetPluginInfo says.
	Name string
	// Credential runs Command as another user; the socket's directory and {statedir} are
	// given to that user, so the driver's socket is that user's.
	Credential *syscall.Credential
}

// StartExternalDriver starts (or connects to) a real CSI driver. Fault
// injection and the calls log are not available for it: SetFaults, ClearFaults
// and Calls skip the test.
func StartExternalDriver(t testing.TB, opts ExternalDriverOptions) *Driver {
	t.Helper()
	d := &Driver{}
	switch {
	case opts.Command != "":
		d.SocketPath = filepath.Join(shortTempDir(t), "csi.sock")
		d.Endpoint = "unix://" + d.SocketPath
		// A driver that keeps state on disk (csi-driver-host-path's --statedir) must not
		// share it with other tests, nor lose it when the test restarts the driver.
		statedir := t.TempDir()
		cmdline := strings.NewReplacer("{endpoint}", shellQuote(d.Endpoint), "{statedir}", shellQuote(statedir)).Replace(opts.Command)
		// exec: the driver replaces the shell, so signals reach it directly.
		d.Process = NewProcess(t, "csi-driver", "/bin/sh", "-c", "exec "+cmdline)
		if opts.Credential != nil {
			giveDirs(t, opts.Credential, filepath.Dir(d.SocketPath), statedir)
			d.Process.Credential = opts.Credential
		}
		d.Process.Start(t)
	case opts.Endpoint != "":
		d.SocketPath = strings.TrimPrefix(opts.Endpoint, "unix://")
		d.Endpoint = "unix://" + d.SocketPath
	default:
		t.Fatal("StartExternalDriver: neither Command nor Endpoint given")
	}
	d.waitReady(t)
	if opts.Name != "" && opts.Name != d.Name {
		t.Fatalf("driver at %s is named %q, expected %q", d.Endpoint, d.Name, opts.Name)
	}
	return d
}

// DriverFromEnv starts the driver named by E2E_DRIVER_CMD or
// E2E_DRIVER_ENDPOINT (with E2E_DRIVER_NAME), and otherwise the mock driver
// with mockOpts, so an e2e suite runs unchanged against a real driver.
func DriverFromEnv(t testing.TB, mockOpts MockDriverOptions) *Driver {
	t.Helper()
	cmd, ep := os.Getenv(EnvDriverCmd), os.Getenv(EnvDriverEndpoint)
	if cmd == "" && ep == "" {
		return StartMockDriver(t, mockOpts)
	}
	return StartExternalDriver(t, ExternalDriverOptions{Command: cmd, Endpoint: ep, Name: os.Getenv(EnvDriverName)})
}

// IsMock reports whether the driver is the mock (supports faults and calls).
func (d *Driver) IsMock() bool { return d.mock }

// waitReady waits until the socket answers Probe with ready (or without a
// ready field) and reads the driver name.
func (d *Driver) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(driverReadyTimeout)
	var last error
	for {
		if d.Process != nil {
			if exited, err := d.Process.Exited(); exited {
				t.Fatalf("CSI driver exited during start-up: %v\n%s", err, d.Process.LogTail(logTailLines))
			}
		}
		if last = d.probe(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			msg := ""
			if d.Process != nil {
				msg = d.Process.LogTail(logTailLines)
			}
			t.Fatalf("CSI driver at %s not ready after %v: %v\n%s", d.Endpoint, driverReadyTimeout, last, msg)
		}
		time.Sleep(100 * time.Millisecond) // poll interval inside the deadline loop
	}
}

func (d *Driver) probe() error {
	if _, err := os.Stat(d.SocketPath); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := d.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	id := csi.NewIdentityClient(conn)
	pr, err := id.Probe(ctx, &csi.ProbeRequest{})
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	if r := pr.GetReady(); r != nil && !r.GetValue() {
		return errors.New("probe: not ready")
	}
	info, err := id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return fmt.Errorf("GetPluginInfo: %w", err)
	}
	d.Name = info.GetName()
	return nil
}

// Dial opens a gRPC connection to the driver socket; the caller closes it.
func (d *Driver) Dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+d.SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", d.Endpoint, err)
	}
	return conn, nil
}

// volumeCapability is what the framework's own CSI calls ask for: a
// single-node-writer ext4 mount, the common case every driver supports.
func volumeCapability() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// CreateVolume creates a volume of bytes with the CSI CreateVolume call (any
// CSI driver) and returns its id, to use as the PV's volumeHandle.
func (d *Driver) CreateVolume(ctx context.Context, name string, bytes int64) (string, error) {
	conn, err := d.Dial()
	if err != nil {
		return "", err
	}
	defer conn.Close()
	resp, err := csi.NewControllerClient(conn).CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csi.CapacityRange{RequiredBytes: bytes},
		VolumeCapabilities: []*csi.VolumeCapability{volumeCapability()},
	})
	if err != nil {
		return "", fmt.Errorf("CreateVolume %s: %w", name, err)
	}
	return resp.GetVolume().GetVolumeId(), nil
}

// ExpansionCapabilities reports whether the driver advertises controller EXPAND_VOLUME
// (ControllerGetCapabilities) and node EXPAND_VOLUME (NodeGetCapabilities): a driver with
// only the latter is node-only, the resizer makes no CSI call for it.
func (d *Driver) ExpansionCapabilities(ctx context.Context) (controller, node bool, err error) {
	conn, err := d.Dial()
	if err != nil {
		return false, false, err
	}
	defer conn.Close()
	cc, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return false, false, fmt.Errorf("ControllerGetCapabilities: %w", err)
	}
	for _, c := range cc.GetCapabilities() {
		if c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_EXPAND_VOLUME {
			controller = true
		}
	}
	nc, err := csi.NewNodeClient(conn).NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		return false, false, fmt.Errorf("NodeGetCapabilities: %w", err)
	}
	for _, c := range nc.GetCapabilities() {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_EXPAND_VOLUME {
			node = true
		}
	}
	return controller, node, nil
}

// NodeExpandVolume makes the kubelet's node-side expansion call for a mounted volume:
// volumeID grown to bytes, volumePath standing for the path the volume is published at
// (there is no kubelet and no mount here, so drivers that only check the path, as
// csi-driver-host-path and the mock do, are what it suits). The error keeps the driver's
// gRPC status.
func (d *Driver) NodeExpandVolume(ctx context.Context, volumeID, volumePath string, bytes int64) error {
	conn, err := d.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = csi.NewNodeClient(conn).NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{
		VolumeId:         volumeID,
		VolumePath:       volumePath,
		CapacityRange:    &csi.CapacityRange{RequiredBytes: bytes},
		VolumeCapability: volumeCapability(),
	})
	if err != nil {
		return fmt.Errorf("NodeExpandVolume %s to %d bytes: %w", volumeID, bytes, err)
	}
	return nil
}

// NodeID returns the driver's node id (NodeGetInfo).
func (d *Driver) NodeID(ctx context.Context) (string, error) {
	conn, err := d.Dial()
	if err != nil {
		return "", err
	}
	defer conn.Close()
	resp, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("NodeGetInfo: %w", err)
	}
	return resp.GetNodeId(), nil
}

// PublishVolume attaches the volume to the driver's node with
// ControllerPublishVolume, playing the external-attacher: with an offline-only
// driver, ControllerExpandVolume then fails with FAILED_PRECONDITION.
func (d *Driver) PublishVolume(ctx context.Context, volumeID string) error {
	return d.onNode(ctx, "ControllerPublishVolume "+volumeID, func(c csi.ControllerClient, nodeID string) error {
		_, err := c.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{
			VolumeId:         volumeID,
			NodeId:           nodeID,
			VolumeCapability: volumeCapability(),
		})
		return err
	})
}

// UnpublishVolume detaches the volume (ControllerUnpublishVolume).
func (d *Driver) UnpublishVolume(ctx context.Context, volumeID string) error {
	return d.onNode(ctx, "ControllerUnpublishVolume "+volumeID, func(c csi.ControllerClient, nodeID string) error {
		_, err := c.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: volumeID, NodeId: nodeID})
		return err
	})
}

// onNode makes one controller call about the driver's node, on a connection of its own.
func (d *Driver) onNode(ctx context.Context, what string, call func(csi.ControllerClient, string) error) error {
	nodeID, err := d.NodeID(ctx)
	if err != nil {
		return err
	}
	conn, err := d.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := call(csi.NewControllerClient(conn), nodeID); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Stop stops the driver process (SIGTERM); its socket goes away. Not
// possible for an already running external driver.
func (d *Driver) Stop(t testing.TB) {
	t.Helper()
	if d.Process == nil {
		t.Fatal("Stop: the driver was not started by the test")
	}
	if err := d.Process.Stop(); err != nil {
		t.Logf("stop driver: %v", err)
	}
}

// Start starts a stopped driver again on the same socket and waits for it.
// The mock replays its state journal, so volumes survive.
func (d *Driver) Start(t testing.TB) {
	t.Helper()
	if d.Process == nil {
		t.Fatal("Start: the driver was not started by the test")
	}
	d.Process.Start(t)
	d.waitReady(t)
}

// Restart is Stop then Start.
func (d *Driver) Restart(t testing.TB) {
	t.Helper()
	d.Stop(t)
	d.Start(t)
}

// Fault is one fault-injection rule of the mock driver; the first matching
// rule applies to a call.
type Fault struct {
	// Method is a suffix of the gRPC method, e.g. "ControllerExpandVolume";
	// empty matches every call.
	Method string
	// Code is returned with Message; codes.OK = no error (only Delay).
	Code    codes.Code
	Message string
	// Times is how many calls the rule applies to; 0 = every call. The count
	// restarts on every SetFaults.
	Times int
	// Delay is waited before the answer (the error, or the real call, which
	// then completes even if the caller timed out meanwhile).
	Delay time.Duration
	// MinRequiredBytes: only calls with capacity_range.required_bytes >= it.
	MinRequiredBytes int64
	// VolumeID: only calls for this volume.
	VolumeID string
	// MutableParameter: "key" or "key=value"; only ControllerModifyVolume
	// calls whose mutable parameters have it (e.g. one class's parameter,
	// to make that class infeasible).
	MutableParameter string
}

// faultJSON is the mock driver's fault-file format (see
// test/k8s-bins/cmd/mock-csi-driver/faults.go).
type faultJSON struct {
	Method           string `json:"method,omitempty"`
	Code             uint32 `json:"code,omitempty"`
	Message          string `json:"message,omitempty"`
	Times            int    `json:"times,omitempty"`
	Delay            string `json:"delay,omitempty"`
	MinRequiredBytes int64  `json:"minRequiredBytes,omitempty"`
	VolumeID         string `json:"volumeId,omitempty"`
	MutableParameter string `json:"mutableParameter,omitempty"`
}

func marshalFaults(faults []Fault) ([]byte, error) {
	out := make([]faultJSON, 0, len(faults))
	for _, f := range faults {
		fj := faultJSON{
			Method: f.Method, Code: uint32(f.Code), Message: f.Message, Times: f.Times,
			MinRequiredBytes: f.MinRequiredBytes, VolumeID: f.VolumeID, MutableParameter: f.MutableParameter,
		}
		if f.Delay > 0 {
			fj.Delay = f.Delay.String()
		}
		out = append(out, fj)
	}
	return json.MarshalIndent(out, "", "  ")
}

func (d *Driver) requireMock(t testing.TB, what string) {
	t.Helper()
	if !d.mock {
		t.Skipf("%s needs the mock CSI driver; %s is an external driver", what, d.Name)
	}
}

// SetFaults replaces the mock driver's fault rules. The driver reads the
// file on every call, so the rules apply from the next call on.
func (d *Driver) SetFaults(t testing.TB, faults []Fault) {
	t.Helper()
	d.requireMock(t, "fault injection")
	b, err := marshalFaults(faults)
	if err != nil {
		t.Fatal(err)
	}
	// Write-then-rename: the driver never reads a half-written file.
	tmp := d.faultsFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, d.faultsFile); err != nil {
		t.Fatal(err)
	}
}

// ClearFaults removes all fault rules.
func (d *Driver) ClearFaults(t testing.TB) {
	t.Helper()
	d.SetFaults(t, nil)
}

// Call is one gRPC call the mock driver received, from its calls log.
type Call struct {
	Method        string     `json:"method"` // e.g. "ControllerExpandVolume"
	Time          time.Time  `json:"time"`   // when the call arrived
	DurationMs    float64    `json:"durationMs"`
	CodeName      string     `json:"code"`     // e.g. "OK", "OUT_OF_RANGE"
	Code          codes.Code `json:"-"`        // parsed from CodeName
	Message       string     `json:"message"`  // error message
	Injected      bool       `json:"injected"` // the error came from a Fault
	VolumeID      string     `json:"volumeId"`
	RequiredBytes int64      `json:"requiredBytes"` // capacity_range.required_bytes
	// CapacityBytes and NodeExpansionRequired are from the response.
	CapacityBytes         int64 `json:"capacityBytes"`
	NodeExpansionRequired bool  `json:"nodeExpansionRequired"`
	// MutableParameters of a ControllerModifyVolume call.
	MutableParameters map[string]string `json:"mutableParameters"`
	Request           json.RawMessage   `json:"request"` // the request as protojson
}

// End is when the driver answered the call.
func (c Call) End() time.Time {
	return c.Time.Add(time.Duration(c.DurationMs * float64(time.Millisecond)))
}

// DescribeCalls renders calls for a failure message: "start..end CODE requiredBytesB".
func DescribeCalls(calls []Call) string {
	var parts []string
	for _, c := range calls {
		parts = append(parts, fmt.Sprintf("%s..%s %s %dB", c.Time.Format(time.StampMicro), c.End().Format(time.StampMicro), c.CodeName, c.RequiredBytes))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// VolumeCalls returns the mock driver's ControllerExpandVolume calls for volume id vol,
// oldest first.
func (d *Driver) VolumeCalls(t testing.TB, vol string) []Call {
	t.Helper()
	var out []Call
	for _, c := range d.Calls(t, "ControllerExpandVolume") {
		if c.VolumeID == vol {
			out = append(out, c)
		}
	}
	return out
}

// ModifyCalls returns the mock driver's ControllerModifyVolume calls for volume id vol
// ("" = every volume), oldest first.
func (d *Driver) ModifyCalls(t testing.TB, vol string) []Call {
	t.Helper()
	var out []Call
	for _, c := range d.Calls(t, "ControllerModifyVolume") {
		if vol == "" || c.VolumeID == vol {
			out = append(out, c)
		}
	}
	return out
}

// WaitCallAcross waits until the mock's calls log holds a ControllerExpandVolume call for
// volume vol that was answered after at and arrived before sentBefore: proof that something done
// at at (a SIGKILL, an apiserver stop) hit a call in flight. sentBefore is a moment until which
// only the process that was hit can have called (its successor's start or takeover): a call
// written to the socket just before a SIGKILL may reach the driver a few microseconds after the
// signal was sent, so the arrival is not compared with at itself. The mock logs a call when it
// answers, so the wait covers any injected delay.
func (d *Driver) WaitCallAcross(t testing.TB, vol string, sentBefore, at time.Time, what string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, func() (bool, string) {
		calls := d.VolumeCalls(t, vol)
		for _, c := range calls {
			if c.Time.Before(sentBefore) && c.End().After(at) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("no call for %s arrived before %s and was answered after %s at %s: %s",
			vol, sentBefore.Format(time.StampMicro), what, at.Format(time.StampMicro), DescribeCalls(calls))
	})
}

// Calls returns the calls the mock driver received whose method ends with
// method ("" = all), oldest first, across restarts.
func (d *Driver) Calls(t testing.TB, method string) []Call {
	t.Helper()
	d.requireMock(t, "the calls log")
	calls, err := readCalls(d.callsLog, method)
	if err != nil {
		t.Fatalf("calls log: %v", err)
	}
	return calls
}

func readCalls(path, method string) ([]Call, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var calls []Call
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			// Only a line being written right now can be incomplete,
			// and only the last one; it shows up on the next read.
			continue
		}
		if method != "" && !strings.HasSuffix(c.Method, method) {
			continue
		}
		c.Code = parseCodeName(c.CodeName)
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

// parseCodeName maps gRPC's canonical code names (as the mock logs them) to
// codes; unknown names give codes.Unknown.
func parseCodeName(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if canonicalCodeName(c) == name {
			return c
		}
	}
	return codes.Unknown
}

// canonicalCodeName is gRPC's upper-snake name of c (CANCELLED, OUT_OF_RANGE).
func canonicalCodeName(c codes.Code) string {
	if c == codes.Canceled {
		return "CANCELLED"
	}
	var b strings.Builder
	prevLower := false
	for _, r := range c.String() {
		isUpper := r >= 'A' && r <= 'Z'
		if isUpper && prevLower {
			b.WriteByte('_')
		}
		prevLower = !isUpper
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// shortTempDir returns a fresh dir with a short path for unix sockets (their
// path is limited to 108 bytes and t.TempDir() paths, named after the test,
// can be longer). It is removed when the test ends.
func shortTempDir(t testing.TB) string {
	t.Helper()
	base := os.TempDir()
	if len(base) > 40 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "csi-")
	if err != nil {
		t.Fatalf("socket dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// giveDirs makes dirs (and their parents up to the root) reachable by cred's user, and dirs
// themselves its own.
func giveDirs(t testing.TB, cred *syscall.Credential, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
		MakeReachable(t, dir)
	}
}

// MakeReachable lets every user enter dir and its parents (adds o+rx where it is missing), for
// a process run as another user (Process.Credential).
func MakeReachable(t testing.TB, dir string) {
	t.Helper()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o005); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// shellQuote quotes s for /bin/sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
