package kubeletstats

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	v1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Defaults for the zero values of Options.
const (
	DefaultTimeout          = 10 * time.Second
	DefaultMaxResponseBytes = 16 << 20
	DefaultTokenRefresh     = time.Minute
)

// summaryPath is what is read. only_cpu_and_memory=false asks the kubelet for the full summary:
// with true it leaves out the pods' volume stats, which are all this package needs. false is
// the kubelet's default; it is written out so that no proxy or future default can change it.
const summaryPath = "/stats/summary?only_cpu_and_memory=false"

// Options configure a Client.
type Options struct {
	// CAFile is a PEM bundle of the CAs that sign the kubelets' serving certificates. Exactly
	// one of CAFile and InsecureSkipVerify must be set: an unverified connection is never the
	// silent default, because the bearer token is sent on it.
	CAFile string
	// InsecureSkipVerify accepts any serving certificate (--kubelet-insecure-tls): for test
	// clusters whose kubelets have self-signed certificates.
	InsecureSkipVerify bool
	// TokenFile holds the bearer token (the ServiceAccount's projected token). Empty sends no
	// token; the kubelet then sees an anonymous request and normally refuses it.
	TokenFile string
	// TokenRefresh is how old a token read from TokenFile may get before it is read again.
	// Projected tokens are rotated by the kubelet well before they expire (at 80% of their
	// lifetime, at least 10 minutes), so a minute is always early enough. A 401 also makes the
	// client read the file again at once and retry once if the token changed.
	TokenRefresh time.Duration
	// Timeout bounds one request, from dialing to the last byte of the body.
	Timeout time.Duration
	// MaxResponseBytes bounds the body read; a larger answer is an error, not a truncated read.
	// A summary is roughly 2-10 KiB per pod, so the default fits several hundred pods with room.
	MaxResponseBytes int64
	// AddressTypes is the preference list for the Node's address; nil means DefaultAddressTypes.
	AddressTypes []v1.NodeAddressType
	// Clock is for the token's age; nil means the real clock.
	Clock clock.PassiveClock
}

// Client reads kubelets' summaries. It is safe for concurrent use.
type Client struct {
	http         *http.Client
	caFile       string
	token        *tokenSource
	timeout      time.Duration
	maxBytes     int64
	addressTypes []v1.NodeAddressType
}

// NewClient checks the options and loads the CA bundle.
func NewClient(o Options) (*Client, error) {
	tlsConfig, err := tlsConfig(o)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.TokenRefresh <= 0 {
		o.TokenRefresh = DefaultTokenRefresh
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if len(o.AddressTypes) == 0 {
		o.AddressTypes = DefaultAddressTypes
	}
	transport := &http.Transport{
		// Never an HTTP(S)_PROXY from the environment: the bearer token goes to the kubelet only.
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: o.Timeout,
		// One kept-alive connection per kubelet: each is read once per poll interval.
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     2 * time.Minute,
	}
	return &Client{
		http: &http.Client{
			Transport: transport,
			// A kubelet does not redirect /stats/summary; following a redirect would hand the
			// token to whatever it points at.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		caFile:       o.CAFile,
		token:        &tokenSource{path: o.TokenFile, refresh: o.TokenRefresh, clock: o.Clock},
		timeout:      o.Timeout,
		maxBytes:     o.MaxResponseBytes,
		addressTypes: o.AddressTypes,
	}, nil
}

func tlsConfig(o Options) (*tls.Config, error) {
	switch {
	case o.CAFile != "" && o.InsecureSkipVerify:
		return nil, errors.New("kubelet TLS: a CA file and insecure mode are both set; choose one")
	case o.InsecureSkipVerify:
		return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}, nil //nolint:gosec // explicit --kubelet-insecure-tls
	case o.CAFile == "":
		return nil, errors.New("kubelet TLS: no CA file to verify kubelet serving certificates; " +
			"give one (--kubelet-certificate-authority) or choose insecure mode (--kubelet-insecure-tls)")
	}
	pem, err := os.ReadFile(o.CAFile)
	if err != nil {
		return nil, fmt.Errorf("kubelet TLS: reading the CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("kubelet TLS: the CA file %s holds no PEM certificate", o.CAFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// Summary reads and decodes the summary of the kubelet on node. Every error is an *Error.
func (c *Client) Summary(ctx context.Context, node *v1.Node) (*statsv1alpha1.Summary, error) {
	addr, err := Endpoint(node, c.addressTypes)
	if err != nil {
		return nil, &Error{Node: node.Name, Reason: ReasonNoEndpoint, Err: err}
	}
	token, err := c.token.get(false)
	if err != nil {
		return nil, &Error{Node: node.Name, Address: addr, Reason: ReasonToken, Err: err}
	}
	body, err := c.get(ctx, node.Name, addr, token)
	var e *Error
	if errors.As(err, &e) && e.Reason == ReasonUnauthorized && c.token.path != "" {
		// The token may have rotated since it was read: read the file again and, if it holds
		// another token, try once more with it.
		fresh, terr := c.token.get(true)
		if terr != nil {
			return nil, &Error{Node: node.Name, Address: addr, Reason: ReasonToken, Err: terr}
		}
		if fresh != token {
			body, err = c.get(ctx, node.Name, addr, fresh)
		}
	}
	if err != nil {
		return nil, err
	}
	var summary statsv1alpha1.Summary
	if err := json.Unmarshal(body, &summary); err != nil {
		return nil, &Error{Node: node.Name, Address: addr, Reason: ReasonDecode,
			Err: fmt.Errorf("decoding the summary: %w", err), Hint: "the port answered, but not with a kubelet Summary"}
	}
	// The kubelet names its node in the summary. Another name means the address reached some
	// other node's kubelet (a stale or reused address): its numbers are not this node's.
	if summary.Node.NodeName != "" && summary.Node.NodeName != node.Name {
		return nil, &Error{Node: node.Name, Address: addr, Reason: ReasonWrongNode,
			Err:  fmt.Errorf("the kubelet there is node %s's", summary.Node.NodeName),
			Hint: "the Node's address is stale or used by another node; check status.addresses and --kubelet-preferred-address-types"}
	}
	return &summary, nil
}

// get does one request with its own timeout and returns the body of a 200 answer.
func (c *Client) get(parent context.Context, node, addr, token string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+summaryPath, nil)
	if err != nil {
		return nil, &Error{Node: node, Address: addr, Reason: ReasonNetwork, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(parent, node, addr, err)
	}
	defer resp.Body.Close()
	if ctx.Err() != nil {
		// An answer that raced our deadline may be the server's reaction to our giving up
		// (net/http uses a response that arrives while it closes the connection): not a summary.
		return nil, c.transportError(parent, node, addr, ctx.Err())
	}
	if resp.StatusCode != http.StatusOK {
		// Only the start of an error body is kept: it is for the message.
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, c.statusError(node, addr, resp.StatusCode, head)
	}
	if resp.ContentLength > c.maxBytes {
		return nil, c.tooLarge(node, addr, resp.ContentLength)
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		return nil, c.transportError(parent, node, addr, fmt.Errorf("reading the answer: %w", err))
	}
	if n > c.maxBytes {
		return nil, c.tooLarge(node, addr, -1)
	}
	return buf.Bytes(), nil
}

func (c *Client) tooLarge(node, addr string, length int64) *Error {
	size := "more than the limit"
	if length >= 0 {
		size = fmt.Sprintf("%d bytes", length)
	}
	return &Error{Node: node, Address: addr, Reason: ReasonTooLarge,
		Err:  fmt.Errorf("the summary is %s, the limit is %d bytes", size, c.maxBytes),
		Hint: "raise --kubelet-max-response-bytes if this node really runs that many pods"}
}
