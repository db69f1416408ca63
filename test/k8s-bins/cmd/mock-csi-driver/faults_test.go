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
