package framework

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// These tests cover the framework pieces that need no control plane; they
// run in the plain unit run.

func TestCanonicalCodeNames(t *testing.T) {
	want := map[codes.Code]string{
		codes.OK: "OK", codes.Canceled: "CANCELLED", codes.OutOfRange: "OUT_OF_RANGE",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.FailedPrecondition: "FAILED_PRECONDITION",
	}
	for c, name := range want {
		if got := canonicalCodeName(c); got != name {
			t.Errorf("canonicalCodeName(%v) = %q, want %q", c, got, name)
		}
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if got := parseCodeName(canonicalCodeName(c)); got != c {
			t.Errorf("round trip of %v gave %v", c, got)
		}
	}
}

func TestMarshalFaults(t *testing.T) {
	b, err := marshalFaults([]Fault{
		{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: "m", Times: 2, Delay: 1500 * time.Millisecond, MinRequiredBytes: 10},
		{Method: "Probe"},
		{Method: "ControllerModifyVolume", Code: codes.InvalidArgument, MutableParameter: "iops=99999"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2]["mutableParameter"] != "iops=99999" || got[0]["code"] != float64(codes.OutOfRange) || got[0]["delay"] != "1.5s" ||
		got[0]["times"] != float64(2) || got[0]["minRequiredBytes"] != float64(10) {
		t.Fatalf("unexpected fault file: %s", b)
	}
	if _, has := got[0]["mutableParameter"]; has {
		t.Errorf("empty mutableParameter must be omitted (it would match no expansion call): %s", b)
	}
	if _, hasCode := got[1]["code"]; hasCode {
		t.Errorf("OK code must be omitted (no error): %s", b)
	}
}

func TestReadCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.jsonl")
	log := `{"method":"ControllerExpandVolume","code":"OUT_OF_RANGE","injected":true,"volumeId":"4","requiredBytes":5}
{"method":"Probe","code":"OK"}
{"method":"ControllerExpandVolume","code":"OK","volumeId":"4","requiredBytes":3,"capacityBytes":3}
{"method":"ControllerModifyVolume","code":"OK","volumeId":"4","mutableParameters":{"iops":"3000"}}
{"method":"ControllerExp`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	calls, err := readCalls(path, "ExpandVolume")
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || calls[0].Code != codes.OutOfRange || !calls[0].Injected || calls[1].Code != codes.OK || calls[1].CapacityBytes != 3 {
		t.Fatalf("calls: %+v", calls)
	}
	if m, _ := readCalls(path, "ControllerModifyVolume"); len(m) != 1 || m[0].MutableParameters["iops"] != "3000" {
		t.Fatalf("modify calls: %+v", m)
	}
	if all, _ := readCalls(path, ""); len(all) != 4 {
		t.Fatalf("all calls: %+v", all)
	}
	if none, err := readCalls(filepath.Join(t.TempDir(), "missing"), ""); err != nil || len(none) != 0 {
		t.Fatalf("missing log: %v %v", none, err)
	}
}

func TestTailLines(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 500; i++ {
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	b.WriteString("last")
	got := tailLines(b.String(), 3)
	if want := "x\nxx\nlast\n"; got != want {
		t.Fatalf("tail = %q, want %q", got, want)
	}
}

func TestProcessStopRestartKill(t *testing.T) {
	p := StartProcess(t, "sleep", "/bin/sleep", "60")
	if exited, _ := p.Exited(); exited {
		t.Fatal("exited at once")
	}
	first := p.Pid()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if exited, err := p.Exited(); !exited || err == nil {
		t.Fatalf("after Stop: exited=%v err=%v (want killed by SIGTERM)", exited, err)
	}
	p.Start(t)
	if p.Pid() == first {
		t.Fatal("same pid after restart")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.ExitCode() != -1 {
		t.Errorf("exit code after SIGKILL = %d, want -1", p.ExitCode())
	}
	if n := strings.Count(p.Log(), "=== sleep start #"); n != 2 {
		t.Errorf("log has %d start headers, want 2:\n%s", n, p.Log())
	}
}

// Freeze stops the process (state T in /proc), Thaw lets it run again.
func TestProcessFreezeThaw(t *testing.T) {
	p := StartProcess(t, "sleep", "/bin/sleep", "60")
	state := func() string {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.Pid()), "stat"))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...: the state is the field after the closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return f[0]
	}
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, func() (bool, string) { return state() == "T", "state " + state() + ", want T (stopped)" })
	if err := p.Thaw(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 5*time.Second, func() (bool, string) { return state() != "T", "still stopped after Thaw" })
	if exited, err := p.Exited(); exited {
		t.Fatalf("exited after Thaw: %v", err)
	}
}

func TestEventuallyAndConsistently(t *testing.T) {
	n := 0
	Eventually(t, 5*time.Second, func() (bool, string) { n++; return n >= 3, "counting" })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	Consistently(t, 3*PollInterval, func() (bool, string) { return true, "" })
}

func TestModulePath(t *testing.T) {
	if got := modulePath([]byte("// comment\nmodule github.com/x/y\n\ngo 1.26\n")); got != "github.com/x/y" {
		t.Fatalf("modulePath = %q", got)
	}
}

func TestHostpathExpandCalls(t *testing.T) {
	log := strings.Join([]string{
		`I1129 04:00:00.000001 1 utils.go:98] GRPC call: /csi.v1.Controller/ControllerExpandVolume`,
		`I1129 04:00:00.000002 1 utils.go:98] GRPC call: /csi.v1.Controller/ControllerExpandVolume`,
		`I1129 04:00:00.000003 1 utils.go:99] GRPC request: {"capacity_range":{"required_bytes":2147483648},"volume_id":"a"}`,
		`I1129 04:00:00.000004 1 utils.go:98] GRPC call: /csi.v1.Node/NodeExpandVolume`,
		`I1129 04:00:00.000005 1 utils.go:99] GRPC request: {"capacity_range":{"required_bytes":2147483648},"volume_id":"b"}`,
		`I1129 04:00:00.000006 1 utils.go:99] GRPC request: {"capacity_range":{"required_bytes":2147483648},"volume_id":"c","volume_path":"/p"}`,
		`I1129 04:00:00.000007 1 utils.go:98] GRPC call: /csi.v1.Controller/CreateVolume`,
		`I1129 04:00:00.000008 1 utils.go:99] GRPC request: {"capacity_range":{"required_bytes":1073741824},"name":"pvc-1"}`,
		`I1129 04:00:00.000009 1 utils.go:98] GRPC call: /csi.v1.Controller/ControllerModifyVolume`,
		`I1129 04:00:00.000010 1 utils.go:99] GRPC request: {"mutable_parameters":{"x":"y"},"volume_id":"d"}`,
	}, "\n")
	// a and b are two ControllerExpandVolume calls whose lines interleave; c is a NodeExpandVolume.
	if got, want := HostpathExpandCalls(log), []string{"a", "b"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("HostpathExpandCalls = %v, want %v", got, want)
	}
}
