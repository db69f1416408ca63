package kubeletstats

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Reason says why reading one kubelet failed. It is the label of the per-node error metric, so
// its values are few and fixed.
type Reason string

// The reasons a read fails.
const (
	ReasonNoEndpoint   Reason = "NoEndpoint"   // the Node has no usable address or port
	ReasonToken        Reason = "Token"        // the token file cannot be read
	ReasonUnauthorized Reason = "Unauthorized" // 401: the kubelet did not accept the token
	ReasonForbidden    Reason = "Forbidden"    // 403: the token's user may not get nodes/stats
	ReasonTLS          Reason = "TLS"          // the serving certificate was not accepted
	ReasonTimeout      Reason = "Timeout"      // no answer within the per-request timeout
	ReasonRefused      Reason = "Refused"      // nothing listens on the address and port
	ReasonNetwork      Reason = "Network"      // any other failure to connect
	ReasonTooLarge     Reason = "TooLarge"     // the answer passed the size limit
	ReasonStatus       Reason = "HTTPStatus"   // another non-200 answer
	ReasonDecode       Reason = "Decode"       // the answer is not a Summary
	ReasonWrongNode    Reason = "WrongNode"    // another node's kubelet answered
	ReasonCanceled     Reason = "Canceled"     // the caller gave up (shutdown, lost leadership)
)

// Error is a failed read of one kubelet: which node, where, why, and what to check. The
// controller turns it into an event on the affected PVCs and a metric, so its text must be
// enough for a person to act on without reading code.
type Error struct {
	Node    string // the Node's name
	Address string // host:port dialed; empty when no endpoint was found
	Reason  Reason
	Hint    string // what to check; may be empty
	Err     error
}

func (e *Error) Error() string {
	where := ""
	if e.Address != "" {
		where = " at " + e.Address
	}
	msg := fmt.Sprintf("reading /stats/summary of the kubelet on node %s%s: %v", e.Node, where, e.Err)
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the Reason of an error from this package, or "" for any other error.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// transportError classifies an error from http.Client.Do or from reading the body. parent is
// the caller's context: when it is done, the caller gave up, which is no fault of the kubelet.
func (c *Client) transportError(parent context.Context, node, addr string, err error) *Error {
	e := &Error{Node: node, Address: addr, Err: err}
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var recordErr tls.RecordHeaderError
	var netErr net.Error
	switch {
	case parent.Err() != nil:
		e.Reason = ReasonCanceled
	case errors.As(err, &hostErr):
		e.Reason = ReasonTLS
		e.Hint = fmt.Sprintf("the kubelet's serving certificate does not name %s: pick an address type it names "+
			"with --kubelet-preferred-address-types, or issue serving certificates that include the node's addresses "+
			"(kubelet serverTLSBootstrap)", hostErr.Host)
	case errors.As(err, &unknownCA), errors.As(err, &invalid), errors.As(err, &certErr):
		e.Reason = ReasonTLS
		e.Hint = c.caHint()
	case errors.As(err, &recordErr):
		e.Reason = ReasonTLS
		e.Hint = "the port did not answer with TLS: check status.daemonEndpoints.kubeletEndpoint.port is the kubelet's HTTPS port"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		e.Reason = ReasonTimeout
		e.Hint = fmt.Sprintf("no answer within %s: check that this pod can reach the node's kubelet port "+
			"(NetworkPolicy, firewall, security groups) and that the kubelet is not overloaded", c.timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		e.Reason = ReasonRefused
		e.Hint = "connection refused: check the kubelet is running and listens on the port the Node reports " +
			"in status.daemonEndpoints, and that no firewall rejects it"
	default:
		e.Reason = ReasonNetwork
		e.Hint = "check that this pod can reach the node's address (--kubelet-preferred-address-types) and kubelet port"
	}
	return e
}

func (c *Client) caHint() string {
	if c.caFile == "" {
		return "the kubelet's serving certificate was not accepted: give the CA that signs it with " +
			"--kubelet-certificate-authority, or (tests only) --kubelet-insecure-tls"
	}
	return fmt.Sprintf("the kubelet's serving certificate is not signed by a CA in %s: give the CA that signs "+
		"kubelet serving certificates with --kubelet-certificate-authority, or (tests only) --kubelet-insecure-tls", c.caFile)
}

// statusError builds the error for a non-200 answer. body is the start of the answer: the
// kubelet's 403 text names the user and the attributes it checked, which is the fastest way to
// see which ServiceAccount lacks which permission.
func (c *Client) statusError(node, addr string, code int, body []byte) *Error {
	e := &Error{Node: node, Address: addr, Err: fmt.Errorf("HTTP %d: %s", code, snippet(body))}
	switch code {
	case 401:
		e.Reason = ReasonUnauthorized
		e.Hint = "the kubelet did not accept the bearer token: check the kubelet authenticates tokens " +
			"(--authentication-token-webhook) and that " + c.tokenWhat() + " holds a valid ServiceAccount token"
	case 403:
		e.Reason = ReasonForbidden
		e.Hint = "grant this ServiceAccount get on nodes/stats (ClusterRole rule: apiGroups [\"\"], " +
			"resources [nodes/stats], verbs [get]); nodes/proxy is not needed and must not be granted"
	default:
		e.Reason = ReasonStatus
	}
	return e
}

func (c *Client) tokenWhat() string {
	if c.token.path == "" {
		return "a token file (none is configured, so the request was anonymous)"
	}
	return "the token file " + c.token.path
}

// snippet is the start of an answer's body, for error messages.
func snippet(body []byte) string {
	const max = 300
	if len(body) > max {
		return string(body[:max]) + "..."
	}
	if len(body) == 0 {
		return "(empty body)"
	}
	return string(body)
}
