package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// Fault file format: a JSON list of rules, first match wins.
//
//		[
//		  {"method": "ControllerExpandVolume", "code": "OUT_OF_RANGE",
//		   "message": "too big", "times": 0, "delay": "0s",
//		   "minRequiredBytes": 10737418240, "volumeId": "",
//		   "mutableParameter": ""}
//		]
//
//	  - method: suffix of the gRPC method name ("ControllerExpandVolume",
//	    "/csi.v1.Controller/ControllerExpandVolume"); empty matches every call.
//	  - code: gRPC code name ("OUT_OF_RANGE", "OutOfRange", "CANCELLED") or
//	    number; empty or "OK" = no error, only the delay.
//	  - message: the error message returned with code.
//	  - times: how many calls the rule applies to; 0 = every call. The count
//	    restarts whenever the file's content changes.
//	  - delay: a Go duration slept before answering (the injected error or the
//	    real call).
//	  - minRequiredBytes: only calls whose capacity_range.required_bytes is >=
//	    this match (so only too-large sizes are infeasible).
//	  - volumeId: only calls for this volume id match.
//	  - mutableParameter: "key" or "key=value": only ControllerModifyVolume
//	    calls whose mutable_parameters have that key (with that value) match,
//	    so a test can make one VolumeAttributesClass infeasible.
type ruleJSON struct {
	Method           string          `json:"method"`
	Code             json.RawMessage `json:"code,omitempty"`
	Message          string          `json:"message,omitempty"`
	Times            int             `json:"times,omitempty"`
	Delay            string          `json:"delay,omitempty"`
	MinRequiredBytes int64           `json:"minRequiredBytes,omitempty"`
	VolumeID         string          `json:"volumeId,omitempty"`
	MutableParameter string          `json:"mutableParameter,omitempty"`
}

type rule struct {
	ruleJSON
	code  codes.Code
	delay time.Duration
}

// faultSet re-reads the faults file on every call: tests switch faults by
// rewriting the file (atomically, by rename) without restarting the driver.
type faultSet struct {
	path string

	mu      sync.Mutex
	content []byte
	rules   []rule
	used    []int // calls each rule applied to, since content last changed
}

// match returns the rule that applies to this call, or nil, and counts it.
func (f *faultSet) match(method string, req any) (*rule, error) {
	if f.path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		data, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil || !bytes.Equal(data, f.content) {
		rules, err := parseRules(data)
		if err != nil {
			return nil, err
		}
		f.content, f.rules, f.used = data, rules, make([]int, len(rules))
	}

	volID, required, hasRequired := requestFields(req)
	for i := range f.rules {
		r := &f.rules[i]
		if r.Method != "" && !strings.HasSuffix(method, path.Base(r.Method)) {
			continue
		}
		if r.Times > 0 && f.used[i] >= r.Times {
			continue
		}
		if r.MinRequiredBytes > 0 && (!hasRequired || required < r.MinRequiredBytes) {
			continue
		}
		if r.VolumeID != "" && r.VolumeID != volID {
			continue
		}
		if r.MutableParameter != "" && !hasMutableParameter(req, r.MutableParameter) {
			continue
		}
		f.used[i]++
		matched := *r
		return &matched, nil
	}
	return nil, nil
}

func parseRules(data []byte) ([]rule, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return []rule{}, nil
	}
	var raw []ruleJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a typo in a field name must not silently disable a fault
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	rules := make([]rule, 0, len(raw))
	for i, rj := range raw {
		r := rule{ruleJSON: rj}
		var err error
		if r.code, err = parseCode(rj.Code); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		if rj.Delay != "" {
			if r.delay, err = time.ParseDuration(rj.Delay); err != nil {
				return nil, fmt.Errorf("rule %d: delay: %w", i, err)
			}
		}
		if k, _, _ := strings.Cut(rj.MutableParameter, "="); rj.MutableParameter != "" && k == "" {
			return nil, fmt.Errorf("rule %d: mutableParameter %q has no key (want \"key\" or \"key=value\")", i, rj.MutableParameter)
		}
		if rj.Times < 0 {
			return nil, fmt.Errorf("rule %d: times must be >= 0", i)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// codeNames are gRPC's canonical names (as in the gRPC spec and
// status.proto), which tests and logs use.
var codeNames = map[codes.Code]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

func codeName(c codes.Code) string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return strconv.Itoa(int(c))
}

// parseCode accepts a number, a canonical name (OUT_OF_RANGE), Go's name
// (OutOfRange) or either spelling of cancelled, case-insensitively.
func parseCode(raw json.RawMessage) (codes.Code, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return codes.OK, nil
	}
	var n uint32
	if err := json.Unmarshal(raw, &n); err == nil {
		if n > uint32(codes.Unauthenticated) {
			return 0, fmt.Errorf("code %d is not a gRPC code", n)
		}
		return codes.Code(n), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("code must be a string or a number: %s", raw)
	}
	if s == "" {
		return codes.OK, nil
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil && n <= uint64(codes.Unauthenticated) {
		return codes.Code(n), nil
	}
	norm := func(v string) string { return strings.ToLower(strings.ReplaceAll(v, "_", "")) }
	want := norm(s)
	if want == "canceled" {
		want = "cancelled"
	}
	for c, name := range codeNames {
		if norm(name) == want || norm(c.String()) == want {
			return c, nil
		}
	}
	return 0, fmt.Errorf("unknown gRPC code %q", s)
}

// requestFields extracts what rules can match on and the calls log records.
func requestFields(req any) (volumeID string, requiredBytes int64, hasRequired bool) {
	switch r := req.(type) {
	case *csi.ControllerExpandVolumeRequest:
		return r.GetVolumeId(), r.GetCapacityRange().GetRequiredBytes(), r.GetCapacityRange() != nil
	case *csi.NodeExpandVolumeRequest:
		return r.GetVolumeId(), r.GetCapacityRange().GetRequiredBytes(), r.GetCapacityRange() != nil
	case *csi.CreateVolumeRequest:
		return "", r.GetCapacityRange().GetRequiredBytes(), r.GetCapacityRange() != nil
	case interface{ GetVolumeId() string }:
		return r.GetVolumeId(), 0, false
	}
	return "", 0, false
}

// hasMutableParameter reports whether req is a ControllerModifyVolume call
// whose mutable_parameters have spec's key ("key") or key and value
// ("key=value").
func hasMutableParameter(req any, spec string) bool {
	r, ok := req.(*csi.ControllerModifyVolumeRequest)
	if !ok {
		return false
	}
	key, value, withValue := strings.Cut(spec, "=")
	got, found := r.GetMutableParameters()[key]
	return found && (!withValue || got == value)
}
