package expand

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// wantClass is docs/design.md §2.3 rule 6 for each of the 17 gRPC codes.
var wantClass = map[codes.Code]ErrorClass{
	codes.OK:                 ClassFinal, // malformed: an error claiming OK
	codes.Canceled:           ClassTransient,
	codes.Unknown:            ClassFinal,
	codes.InvalidArgument:    ClassInfeasible,
	codes.DeadlineExceeded:   ClassTransient,
	codes.NotFound:           ClassInfeasible,
	codes.AlreadyExists:      ClassFinal,
	codes.PermissionDenied:   ClassFinal,
	codes.ResourceExhausted:  ClassTransient,
	codes.FailedPrecondition: ClassFinal,
	codes.Aborted:            ClassTransient,
	codes.OutOfRange:         ClassInfeasible,
	codes.Unimplemented:      ClassFinal,
	codes.Internal:           ClassFinal,
	codes.Unavailable:        ClassTransient,
	codes.DataLoss:           ClassFinal,
	codes.Unauthenticated:    ClassFinal,
}

// okStatusError is a malformed error that carries a gRPC status with code OK.
type okStatusError struct{}

func (okStatusError) Error() string              { return "ok?" }
func (okStatusError) GRPCStatus() *status.Status { return status.New(codes.OK, "claims OK") }

func TestClassifyErrorAllCodes(t *testing.T) {
	if n := len(allCodes()); n != 17 || len(wantClass) != 17 {
		t.Fatalf("%d codes, %d expectations; want 17", n, len(wantClass))
	}
	for _, code := range allCodes() {
		t.Run(code.String(), func(t *testing.T) {
			want := wantClass[code]
			if got := ClassifyCode(code); got != want {
				t.Errorf("ClassifyCode = %q, want %q", got, want)
			}
			var err error = status.Error(code, "driver message for "+code.String())
			if code == codes.OK {
				err = okStatusError{}
			}
			ce := ClassifyError(err)
			wantMsg := "driver message for " + code.String()
			if code == codes.OK {
				wantMsg = "claims OK"
			}
			if ce.Class != want || ce.Reason != code.String() || ce.Message != wantMsg {
				t.Errorf("ClassifyError = %+v, want {%s %s %q}", ce, want, code.String(), wantMsg)
			}
			if ce.Class.IsFinal() != (want == ClassFinal || want == ClassInfeasible) {
				t.Errorf("IsFinal = %v for %s", ce.Class.IsFinal(), want)
			}
		})
	}
}

func TestClassifyErrorWrapped(t *testing.T) {
	st := status.New(codes.OutOfRange, "requested 100Gi, max 50Gi")
	for _, err := range []error{
		fmt.Errorf("ControllerExpandVolume vol-1: %w", st.Err()),
		fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", st.Err())),
		errors.Join(errors.New("first"), st.Err()),
	} {
		ce := ClassifyError(err)
		if ce.Class != ClassInfeasible || ce.Reason != "OutOfRange" || ce.Message != "requested 100Gi, max 50Gi" {
			t.Errorf("ClassifyError(%q) = %+v", err, ce)
		}
	}
}

func TestClassifyErrorNonGRPC(t *testing.T) {
	for _, err := range []error{
		errors.New("transport is closing"),
		context.DeadlineExceeded,
		context.Canceled,
		fmt.Errorf("dial: %w", errors.New("connection refused")),
	} {
		ce := ClassifyError(err)
		if ce.Class != ClassTransient || ce.Reason != ReasonUncertain || ce.Message != err.Error() {
			t.Errorf("ClassifyError(%q) = %+v, want transient/%s", err, ce, ReasonUncertain)
		}
		if ClassFromReason(ce.Reason) != ClassTransient {
			t.Errorf("reason %q does not read back as transient", ce.Reason)
		}
	}
	if ce := ClassifyError(nil); ce.Class != ClassNone || ce.Class.IsFinal() {
		t.Errorf("ClassifyError(nil) = %+v", ce)
	}
}

func TestClassFromReason(t *testing.T) {
	for _, code := range allCodes() {
		if got := ClassFromReason(code.String()); got != wantClass[code] {
			t.Errorf("ClassFromReason(%q) = %q, want %q", code.String(), got, wantClass[code])
		}
		// The reason FailedStatus writes reads back as the class that was classified.
		if code != codes.OK {
			ce := ClassifyError(status.Error(code, "m"))
			if got := ClassFromReason(ce.Reason); got != ce.Class {
				t.Errorf("round trip of %s: %q, want %q", code, got, ce.Class)
			}
		}
	}
	for _, reason := range []string{"", ReasonUncertain, "outofrange", "OUT_OF_RANGE", "Code(17)", "VolumeResizeFailed", " Internal"} {
		if got := ClassFromReason(reason); got != ClassTransient {
			t.Errorf("ClassFromReason(%q) = %q, want transient", reason, got)
		}
	}
}
