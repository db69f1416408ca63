package expand

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorClass says what a ControllerExpandVolume error means for the state machine.
type ErrorClass string

const (
	// ClassNone: no error recorded.
	ClassNone ErrorClass = ""
	// ClassInfeasible: the driver will never grant this size (INVALID_ARGUMENT, OUT_OF_RANGE,
	// NOT_FOUND). The PVC goes to ControllerResizeInfeasible and is retried slowly.
	ClassInfeasible ErrorClass = "infeasible"
	// ClassFinal: the driver is known not to be working on the request any more, but another
	// try might succeed. State stays ControllerResizeInProgress; spec may be followed next.
	ClassFinal ErrorClass = "final"
	// ClassTransient: the outcome is unknown (timeout, unavailable, ...); the driver may still
	// be expanding, so the allocated size must be kept.
	ClassTransient ErrorClass = "transient"
)

// ReasonUncertain is the condition reason for an error that carries no gRPC status, e.g. a
// broken connection: the call may or may not have reached the driver.
const ReasonUncertain = "Uncertain"

// IsFinal reports whether the driver is known to have stopped working on the request.
func (c ErrorClass) IsFinal() bool { return c == ClassInfeasible || c == ClassFinal }

// ClassifyCode maps a gRPC code to its class. Callers never see codes.OK here; it is mapped to
// final only because an error that claims OK is malformed and retrying it blindly cannot help.
func ClassifyCode(c codes.Code) ErrorClass {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return ClassInfeasible
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return ClassTransient
	default:
		return ClassFinal
	}
}

// ClassifiedError is an error from the driver with its class and the reason/message the PVC
// condition will carry.
type ClassifiedError struct {
	Class ErrorClass
	// Reason is the gRPC code name (e.g. "OutOfRange") or ReasonUncertain.
	Reason string
	// Message is the driver's own message (or the error text when there is no gRPC status).
	Message string
}

// ClassifyError classifies an error returned by a ControllerExpandVolume call.
func ClassifyError(err error) ClassifiedError {
	if err == nil {
		return ClassifiedError{Class: ClassNone}
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) && se.GRPCStatus() != nil {
		st := se.GRPCStatus()
		return ClassifiedError{Class: ClassifyCode(st.Code()), Reason: st.Code().String(), Message: st.Message()}
	}
	return ClassifiedError{Class: ClassTransient, Reason: ReasonUncertain, Message: err.Error()}
}

// ClassFromReason recovers the class of the last error from a ControllerResizeError condition
// reason, so the decision after a restart is the one made before it (rule 7). A reason this
// resizer did not write (another resizer leaves it empty) is treated as transient: keeping the
// allocated size is always safe, following spec is not.
func ClassFromReason(reason string) ErrorClass {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == reason {
			return ClassifyCode(c)
		}
	}
	return ClassTransient
}
