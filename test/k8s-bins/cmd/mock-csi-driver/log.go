package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/protoadapt"

	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

// callEntry is one line of the calls log. The test framework parses it
// (test/framework.Call); keep the two in step.
type callEntry struct {
	Method                string            `json:"method"`
	Time                  time.Time         `json:"time"`
	DurationMs            float64           `json:"durationMs"`
	Code                  string            `json:"code"`
	Message               string            `json:"message,omitempty"`
	Injected              bool              `json:"injected,omitempty"`
	VolumeID              string            `json:"volumeId,omitempty"`
	RequiredBytes         int64             `json:"requiredBytes,omitempty"`
	CapacityBytes         int64             `json:"capacityBytes,omitempty"`
	NodeExpansionRequired bool              `json:"nodeExpansionRequired,omitempty"`
	MutableParameters     map[string]string `json:"mutableParameters,omitempty"`
	Request               json.RawMessage   `json:"request,omitempty"`
}

var logMu sync.Mutex

func (w *wrapper) logCall(method string, start time.Time, req, resp any, err error, injected bool) {
	if w.callsLog == nil {
		return
	}
	st := status.Convert(err)
	e := callEntry{
		Method:     method,
		Time:       start,
		DurationMs: float64(time.Since(start).Microseconds()) / 1000,
		Code:       codeName(st.Code()),
		Message:    st.Message(),
		Injected:   injected,
	}
	e.VolumeID, e.RequiredBytes, _ = requestFields(req)
	if r, ok := req.(*csi.ControllerModifyVolumeRequest); ok {
		e.MutableParameters = r.GetMutableParameters()
	}
	switch r := resp.(type) {
	case *csi.ControllerExpandVolumeResponse:
		e.CapacityBytes, e.NodeExpansionRequired = r.GetCapacityBytes(), r.GetNodeExpansionRequired()
	case *csi.NodeExpandVolumeResponse:
		e.CapacityBytes = r.GetCapacityBytes()
	case *csi.CreateVolumeResponse:
		e.VolumeID, e.CapacityBytes = r.GetVolume().GetVolumeId(), r.GetVolume().GetCapacityBytes()
	}
	if m, ok := req.(protoadapt.MessageV1); ok {
		if b, mErr := protojson.Marshal(protoadapt.MessageV2Of(m)); mErr == nil {
			e.Request = b
		}
	}
	writeLine(w.callsLog, e)
}

// writeLine appends one JSON line with a single write, so a reader never
// sees two calls interleaved (a half-written last line is possible and the
// reader skips it).
func writeLine(f *os.File, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mock-csi-driver: marshal log line: %v\n", err)
		return
	}
	logMu.Lock()
	defer logMu.Unlock()
	if _, err := f.Write(append(b, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "mock-csi-driver: write %s: %v\n", f.Name(), err)
	}
}

// journalEntry is one successful volume-changing call in the state file.
type journalEntry struct {
	Method  string          `json:"method"`
	Request json.RawMessage `json:"request"`
}

// journaled maps the calls that change the mock's volumes to a replay
// function. Replaying them in order recreates the same volume ids, because
// the mock numbers volumes sequentially.
var journaled = map[string]func(svc service.Service, raw []byte) error{
	"CreateVolume": func(svc service.Service, raw []byte) error {
		req := &csi.CreateVolumeRequest{}
		if err := protojson.Unmarshal(raw, protoadapt.MessageV2Of(req)); err != nil {
			return err
		}
		_, err := svc.CreateVolume(context.Background(), req)
		return err
	},
	"DeleteVolume": func(svc service.Service, raw []byte) error {
		req := &csi.DeleteVolumeRequest{}
		if err := protojson.Unmarshal(raw, protoadapt.MessageV2Of(req)); err != nil {
			return err
		}
		_, err := svc.DeleteVolume(context.Background(), req)
		return err
	},
	"ControllerExpandVolume": func(svc service.Service, raw []byte) error {
		req := &csi.ControllerExpandVolumeRequest{}
		if err := protojson.Unmarshal(raw, protoadapt.MessageV2Of(req)); err != nil {
			return err
		}
		_, err := svc.ControllerExpandVolume(context.Background(), req)
		return err
	},
	"ControllerPublishVolume": func(svc service.Service, raw []byte) error {
		req := &csi.ControllerPublishVolumeRequest{}
		if err := protojson.Unmarshal(raw, protoadapt.MessageV2Of(req)); err != nil {
			return err
		}
		_, err := svc.ControllerPublishVolume(context.Background(), req)
		return err
	},
	"ControllerUnpublishVolume": func(svc service.Service, raw []byte) error {
		req := &csi.ControllerUnpublishVolumeRequest{}
		if err := protojson.Unmarshal(raw, protoadapt.MessageV2Of(req)); err != nil {
			return err
		}
		_, err := svc.ControllerUnpublishVolume(context.Background(), req)
		return err
	},
}

func (w *wrapper) record(method string, req any) {
	if w.journal == nil || journaled[method] == nil {
		return
	}
	m, ok := req.(protoadapt.MessageV1)
	if !ok {
		return
	}
	// The CSI spec module is generated with the v1 protobuf API.
	b, err := protojson.Marshal(protoadapt.MessageV2Of(m))
	if err != nil {
		fmt.Fprintf(os.Stderr, "mock-csi-driver: journal %s: %v\n", method, err)
		return
	}
	writeLine(w.journal, journalEntry{Method: method, Request: b})
}

// replayJournal re-applies the journal to a fresh service and returns how
// many calls it replayed.
func replayJournal(path string, svc service.Service) (int, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e journalEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Only a line cut short by a kill can be broken; it is the last one.
			continue
		}
		replay := journaled[e.Method]
		if replay == nil {
			continue
		}
		if err := replay(svc, e.Request); err != nil {
			return n, fmt.Errorf("replay %s %s: %w", e.Method, e.Request, err)
		}
		if e.Method == "ControllerUnpublishVolume" {
			req := &csi.ControllerUnpublishVolumeRequest{}
			if err := protojson.Unmarshal(e.Request, protoadapt.MessageV2Of(req)); err == nil {
				afterVolumeCall(e.Method, req)
			}
		}
		n++
	}
	return n, sc.Err()
}
