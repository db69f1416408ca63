package modify

import (
	"google.golang.org/grpc/codes"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
)

// ClassifyCode maps a ControllerModifyVolume error code to its class (docs/design.md §2.11
// rule 16). It differs from expansion's in one way: only INVALID_ARGUMENT is infeasible, the
// code CSI gives for mutable parameters the volume cannot take, as upstream treats it. NOT_FOUND
// and OUT_OF_RANGE are final: the driver stopped, and the next attempt follows the spec.
func ClassifyCode(c codes.Code) expand.ErrorClass {
	if c == codes.InvalidArgument {
		return expand.ClassInfeasible
	}
	if cl := expand.ClassifyCode(c); cl == expand.ClassTransient {
		return cl
	}
	return expand.ClassFinal
}

// ClassifyError classifies an error of a ControllerModifyVolume call. An error without a gRPC
// status (a broken connection) is transient: the call may have reached the driver.
func ClassifyError(err error) expand.ClassifiedError {
	ce := expand.ClassifyError(err)
	if ce.Class != expand.ClassNone && ce.Reason != expand.ReasonUncertain {
		ce.Class = ClassifyReason(ce.Reason)
	}
	return ce
}

// ClassifyReason recovers the class of the last error from the ModifyVolumeError condition's
// reason, the gRPC code name this resizer writes there. A reason it did not write (upstream's
// resizer leaves it empty) counts as transient: keeping the recorded target is always safe,
// following the spec is not.
func ClassifyReason(reason string) expand.ErrorClass {
	switch reason {
	case ReasonClassDeleted:
		return expand.ClassFinal
	case ReasonClassOfAnotherDriver:
		return expand.ClassInfeasible
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == reason {
			return ClassifyCode(c)
		}
	}
	return expand.ClassTransient
}
