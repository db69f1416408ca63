package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

func TestParseCode(t *testing.T) {
	for in, want := range map[string]codes.Code{
		`"OUT_OF_RANGE"`: codes.OutOfRange, `"OutOfRange"`: codes.OutOfRange, `"out_of_range"`: codes.OutOfRange,
		`11`: codes.OutOfRange, `"11"`: codes.OutOfRange, `"CANCELLED"`: codes.Canceled, `"Canceled"`: codes.Canceled,
		`""`: codes.OK, `null`: codes.OK, `"OK"`: codes.OK,
	} {
		got, err := parseCode(json.RawMessage(in))
		if err != nil || got != want {
			t.Errorf("parseCode(%s) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{`"NOPE"`, `17`, `true`} {
		if _, err := parseCode(json.RawMessage(bad)); err == nil {
			t.Errorf("parseCode(%s): no error", bad)
		}
	}
}

func TestFaultMatching(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults.json")
	f := &faultSet{path: path}
	req := func(bytes int64) *csi.ControllerExpandVolumeRequest {
		return &csi.ControllerExpandVolumeRequest{VolumeId: "4", CapacityRange: &csi.CapacityRange{RequiredBytes: bytes}}
	}
	if r, err := f.match("ControllerExpandVolume", req(1)); r != nil || err != nil {
		t.Fatalf("no file: %v %v", r, err)
	}
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`[{"method":"ControllerExpandVolume","code":"OUT_OF_RANGE","minRequiredBytes":100},
	        {"method":"ExpandVolume","code":"INTERNAL","times":1}]`)
	if r, _ := f.match("ControllerExpandVolume", req(100)); r == nil || r.code != codes.OutOfRange {
		t.Fatalf("big request: %+v", r)
	}
	if r, _ := f.match("ControllerExpandVolume", req(10)); r == nil || r.code != codes.Internal {
		t.Fatalf("small request, first: %+v", r)
	}
	if r, _ := f.match("ControllerExpandVolume", req(10)); r != nil {
		t.Fatalf("small request, times exhausted: %+v", r)
	}
	if r, _ := f.match("Probe", &csi.ProbeRequest{}); r != nil {
		t.Fatalf("other method matched: %+v", r)
	}
	// Rewriting the file restarts the counts.
	write(`[{"method":"ExpandVolume","code":"INTERNAL","times":1} ]`)
	if r, _ := f.match("NodeExpandVolume", &csi.NodeExpandVolumeRequest{VolumeId: "4"}); r == nil {
		t.Fatal("count not reset after rewrite")
	}
	write(`[{"methd":"x"}]`)
	if _, err := f.match("Probe", &csi.ProbeRequest{}); err == nil {
		t.Fatal("unknown field accepted")
	}
}

func TestFaultMutableParameter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "faults.json")
	if err := os.WriteFile(path, []byte(`[
	  {"method":"ControllerModifyVolume","code":"INVALID_ARGUMENT","mutableParameter":"iops=99999"},
	  {"code":"INTERNAL","mutableParameter":"tier"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	f := &faultSet{path: path}
	modify := func(params map[string]string) *csi.ControllerModifyVolumeRequest {
		return &csi.ControllerModifyVolumeRequest{VolumeId: "1", MutableParameters: params}
	}
	for _, tc := range []struct {
		name   string
		method string
		req    any
		want   codes.Code // OK = no rule
	}{
		{"key and value", "ControllerModifyVolume", modify(map[string]string{"iops": "99999"}), codes.InvalidArgument},
		{"other value", "ControllerModifyVolume", modify(map[string]string{"iops": "3000"}), codes.OK},
		{"key only", "ControllerModifyVolume", modify(map[string]string{"tier": "gold"}), codes.Internal},
		{"no parameters", "ControllerModifyVolume", modify(nil), codes.OK},
		{"not a modify call", "ControllerExpandVolume", &csi.ControllerExpandVolumeRequest{VolumeId: "1"}, codes.OK},
	} {
		r, err := f.match(tc.method, tc.req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		switch {
		case tc.want == codes.OK && r != nil:
			t.Errorf("%s: rule %+v matched, want none", tc.name, r.ruleJSON)
		case tc.want != codes.OK && (r == nil || r.code != tc.want):
			t.Errorf("%s: got %+v, want a rule with %v", tc.name, r, tc.want)
		}
	}
	if _, err := parseRules([]byte(`[{"mutableParameter":"=x"}]`)); err == nil {
		t.Error("mutableParameter without a key accepted")
	}
}
