package framework

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// DefaultResizerTimeout is csi-resizer's default --timeout, and so of each CSI call (upstream's
// default; tests with slow-driver faults pass their own).
const DefaultResizerTimeout = 10 * time.Second

// StartResizer runs the csi-resizer binary (BuildResizer) as a separate
// process against driver, with:
//
//	--csi-address=<driver socket> --kubeconfig=<kubeconfig>
//	--http-endpoint=127.0.0.1:<free port> -v=4
//
// followed by extraArgs (a repeated flag overrides the default). It passes no --timeout: an
// explicit one would override --resize-timeout and --modify-timeout (upstream's precedence),
// and the default is DefaultResizerTimeout anyway. An empty
// kubeconfig means the cluster's admin kubeconfig. It does not wait for the
// resizer to be ready (a test may expect it to exit); use WaitHTTP for that.
func StartResizer(t testing.TB, c *Cluster, kubeconfig string, driver *Driver, extraArgs ...string) *Process {
	t.Helper()
	if kubeconfig == "" {
		kubeconfig = c.Kubeconfig
	}
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	args := append([]string{
		"--csi-address=" + driver.SocketPath,
		"--kubeconfig=" + kubeconfig,
		"--http-endpoint=" + addr,
		"-v=4",
	}, extraArgs...)
	p := NewProcess(t, "csi-resizer", BuildResizer(t), args...)
	p.HTTPAddr = addr
	p.Start(t)
	return p
}

// WaitHTTP waits until GET http://HTTPAddr<path> answers 200 (e.g.
// "/metrics"), failing the test if the process exits first or timeout passes.
func (p *Process) WaitHTTP(t testing.TB, path string, timeout time.Duration) {
	t.Helper()
	if p.HTTPAddr == "" {
		t.Fatalf("%s: no HTTPAddr", p.Name)
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	url := "http://" + p.HTTPAddr + path
	if err := waitReady(p, timeout, func() error { return httpOK(url, "", false) }); err != nil {
		t.Fatalf("%s: %v\n%s", p.Name, err, p.LogTail(logTailLines))
	}
}
