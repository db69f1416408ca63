package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// DefaultControllers is kube-controller-manager's --controllers when
// ClusterOptions.Controllers is empty: everything on by default except the
// node lifecycle controller, which would mark the kubelet-less nodes
// NotReady and evict the pods tests mark Running.
//
// The in-tree persistentvolume-expander-controller stays on, as in a real
// cluster: for CSI volumes it finds no expandable in-tree plugin and only
// records a Normal "ExternalExpanding" event ("waiting for an external
// controller to expand this PVC") each time a PVC's request grows above
// its capacity; it never writes the PVC or the PV. Tests that count events
// must filter on the source component ("volume_expand") or reason.
var DefaultControllers = []string{"*", "-node-lifecycle-controller"}

// ClusterOptions selects what StartCluster runs.
type ClusterOptions struct {
	// ControllerManager also runs kube-controller-manager (the PV binder,
	// the StatefulSet, garbage-collector and service-account controllers...).
	ControllerManager bool
	// Controllers is kube-controller-manager's --controllers list; empty =
	// DefaultControllers.
	Controllers []string
	// APIServerArgs and ControllerManagerArgs are appended to the default
	// flags (a repeated flag overrides the default).
	APIServerArgs         []string
	ControllerManagerArgs []string
}

// Cluster is a running control plane. Client and Config use the admin
// (system:masters) identity.
type Cluster struct {
	Dir        string // all files of the cluster
	Host       string // https://127.0.0.1:<port>
	Kubeconfig string // admin kubeconfig
	Config     *rest.Config
	Client     kubernetes.Interface

	Etcd              *Process
	APIServer         *Process
	ControllerManager *Process // nil unless ClusterOptions.ControllerManager

	pki        *pki
	adminToken string
}

// readyTimeout bounds each component's start-up (measured ~5 s for all of
// them on 2 cores; the margin is for a loaded CI machine).
const readyTimeout = 90 * time.Second

// portAttempts is how often a component is restarted on other ports when
// the ones picked were taken by a concurrent process meanwhile.
const portAttempts = 3

// StartCluster starts etcd and kube-apiserver (and kube-controller-manager
// when asked) on free 127.0.0.1 ports under a temp dir of t, waits until they
// are ready and stops them when the test ends.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	bin := BinDir(t)
	c := &Cluster{Dir: t.TempDir()}
	var err error
	if c.pki, err = newPKI(c.Dir); err != nil {
		t.Fatalf("cluster pki: %v", err)
	}
	if c.adminToken, err = randomToken(); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(c.Dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(c.adminToken+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// etcd
	var etcdURL string
	startWithPortRetry(t, "etcd", func() *Process {
		client, peer := FreePort(t), FreePort(t)
		etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		return StartProcess(t, "etcd", filepath.Join(bin, "etcd"),
			"--name=default",
			"--data-dir="+filepath.Join(c.Dir, "etcd-data"),
			"--listen-client-urls="+etcdURL,
			"--advertise-client-urls="+etcdURL,
			"--listen-peer-urls="+peerURL,
			"--initial-advertise-peer-urls="+peerURL,
			"--initial-cluster=default="+peerURL,
			// A test cluster does not need durability against power loss;
			// fsync on every write only makes a loaded CI machine slower.
			"--unsafe-no-fsync=true",
			"--log-level=warn",
		)
	}, func(p *Process) error { return httpOK(etcdURL+"/health", "", false) }, &c.Etcd)

	// kube-apiserver
	apiArgs := func(port int) []string {
		return append([]string{
			"--etcd-servers=" + etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
			"--tls-cert-file=" + c.pki.servCert,
			"--tls-private-key-file=" + c.pki.servKey,
			"--client-ca-file=" + c.pki.caFile,
			"--token-auth-file=" + tokenFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + c.pki.saPubFile,
			"--service-account-signing-key-file=" + c.pki.saPrivFile,
			// Only an address range in the config: no traffic goes there.
			"--service-cluster-ip-range=10.0.0.0/24",
			"--profiling=false",
			// Without it a graceful stop waits up to --request-timeout (60s)
			// for clients' watch streams; with it the HTTP server gets 2s,
			// so RestartAPIServer takes seconds.
			"--shutdown-send-retry-after=true",
			"-v=2",
		}, opts.APIServerArgs...)
	}
	startWithPortRetry(t, "kube-apiserver", func() *Process {
		port := FreePort(t)
		c.Host = "https://127.0.0.1:" + strconv.Itoa(port)
		return StartProcess(t, "kube-apiserver", filepath.Join(bin, "kube-apiserver"), apiArgs(port)...)
	}, func(p *Process) error { return c.apiReady() }, &c.APIServer)

	c.Config = &rest.Config{
		Host:            c.Host,
		BearerToken:     c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caCertPEM},
		// The tests' own client must not be the bottleneck or skew the
		// measurements of the components under test.
		QPS:   500,
		Burst: 1000,
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		t.Fatalf("client: %v", err)
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := c.writeKubeconfig(c.Kubeconfig, "admin", c.adminToken); err != nil {
		t.Fatal(err)
	}

	if opts.ControllerManager {
		controllers := opts.Controllers
		if len(controllers) == 0 {
			controllers = DefaultControllers
		}
		var healthURL string
		startWithPortRetry(t, "kube-controller-manager", func() *Process {
			port := FreePort(t)
			healthURL = "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
			return StartProcess(t, "kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), append([]string{
				"--kubeconfig=" + c.Kubeconfig,
				"--bind-address=127.0.0.1",
				"--secure-port=" + strconv.Itoa(port),
				"--cert-dir=" + filepath.Join(c.Dir, "kcm-certs"),
				"--controllers=" + strings.Join(controllers, ","),
				"--leader-elect=false",
				// Without it kcm reads the extension-apiserver-authentication
				// config map and fails its authn setup on this bare cluster.
				"--authentication-skip-lookup=true",
				// The default is under /usr/libexec, outside the test's dirs.
				"--flex-volume-plugin-dir=" + filepath.Join(c.Dir, "flexvolume"),
				"--service-account-private-key-file=" + c.pki.saPrivFile,
				"--root-ca-file=" + c.pki.caFile,
				"--profiling=false",
				"-v=2",
			}, opts.ControllerManagerArgs...)...)
		}, func(p *Process) error { return httpOK(healthURL, "", true) }, &c.ControllerManager)
	}
	return c
}

// startWithPortRetry starts a component, waits until ready returns nil, and
// starts it again on new ports if it died because its port was taken. The
// process ends up in *dst.
func startWithPortRetry(t testing.TB, name string, start func() *Process, ready func(*Process) error, dst **Process) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p := start()
		*dst = p
		err := waitReady(p, readyTimeout, func() error { return ready(p) })
		if err == nil {
			return
		}
		if attempt < portAttempts && strings.Contains(p.Log(), "address already in use") {
			t.Logf("%s: port taken, retrying on another port (attempt %d)", name, attempt+1)
			_ = p.Kill()
			continue
		}
		t.Fatalf("%s did not become ready: %v\n--- last %d lines of %s ---\n%s", name, err, logTailLines, p.LogPath, p.LogTail(logTailLines))
	}
}

// waitReady polls check until it returns nil, the process exits, or timeout.
func waitReady(p *Process, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited during start-up: %v", p.Name, err)
		}
		if last = check(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, last)
		}
		select {
		case <-tick.C:
		case <-p.Done():
		}
	}
}

// httpOK GETs url and returns nil on 200. TLS is verified only with the
// cluster CA; insecure is for components with self-signed serving certs
// (kcm's /healthz), reached on loopback only.
func httpOK(url, token string, insecure bool) error {
	return httpOKWithCA(url, token, insecure, nil)
}

func httpOKWithCA(url, token string, insecure bool, caPEM []byte) error {
	tlsCfg := &tls.Config{InsecureSkipVerify: insecure} //nolint:gosec // loopback health checks of test components
	if caPEM != nil {
		cfg, err := tlsConfigWithCA(caPEM)
		if err != nil {
			return err
		}
		tlsCfg = cfg
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true},
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func (c *Cluster) apiReady() error {
	return httpOKWithCA(c.Host+"/readyz", c.adminToken, false, c.pki.caCertPEM)
}

// StopAPIServer stops kube-apiserver (SIGTERM); etcd and the other
// components keep running. StartAPIServer brings it back.
func (c *Cluster) StopAPIServer(t testing.TB) {
	t.Helper()
	if err := c.APIServer.Stop(); err != nil {
		t.Logf("stop kube-apiserver: %v", err)
	}
}

// StartAPIServer starts a stopped kube-apiserver again on the same port,
// etcd and keys, and waits until /readyz is OK.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	c.APIServer.Start(t)
	if err := waitReady(c.APIServer, readyTimeout, c.apiReady); err != nil {
		t.Fatalf("kube-apiserver did not become ready after restart: %v\n%s", err, c.APIServer.LogTail(logTailLines))
	}
}

// RestartAPIServer stops and starts kube-apiserver on the same port and etcd
// and waits until it is ready. Tokens stay valid (same keys).
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	c.StopAPIServer(t)
	c.StartAPIServer(t)
}

// Kubectl runs kubectl with the admin kubeconfig and returns its stdout; the
// error includes stderr.
func (c *Cluster) Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return c.KubectlWithInput(t, "", args...)
}

// KubectlWithInput is Kubectl with stdin.
func (c *Cluster) KubectlWithInput(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(Bin(t, "kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// ApplyKustomize renders dir with `kubectl kustomize` and applies the result
// with the admin kubeconfig, failing the test on any error.
func (c *Cluster) ApplyKustomize(t testing.TB, dir string) {
	t.Helper()
	manifests, err := c.Kubectl(t, "kustomize", dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	if out, err := c.KubectlWithInput(t, manifests, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply %s: %v\n%s", dir, err, out)
	}
}

// ServiceAccountKubeconfig returns a kubeconfig that authenticates as the
// service account namespace/name (created, with its namespace, if missing)
// through a TokenRequest token, so a component runs with the RBAC the
// project ships instead of as admin.
func (c *Cluster) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := c.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s/%s: %v", namespace, name, err)
	}
	expiration := int64((24 * time.Hour).Seconds())
	tr, err := c.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiration},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	path := filepath.Join(c.Dir, fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name))
	if err := c.writeKubeconfig(path, "system:serviceaccount:"+namespace+":"+name, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeconfig is the subset of the kubeconfig file format we write (JSON is
// valid kubeconfig; clientcmd is not vendored in the main module).
type kubeconfig struct {
	APIVersion     string              `json:"apiVersion"`
	Kind           string              `json:"kind"`
	Clusters       []kubeconfigCluster `json:"clusters"`
	Users          []kubeconfigUser    `json:"users"`
	Contexts       []kubeconfigContext `json:"contexts"`
	CurrentContext string              `json:"current-context"`
}

type kubeconfigCluster struct {
	Name    string `json:"name"`
	Cluster struct {
		Server                   string `json:"server"`
		CertificateAuthorityData []byte `json:"certificate-authority-data"`
	} `json:"cluster"`
}

type kubeconfigUser struct {
	Name string `json:"name"`
	User struct {
		Token string `json:"token"`
	} `json:"user"`
}

type kubeconfigContext struct {
	Name    string `json:"name"`
	Context struct {
		Cluster string `json:"cluster"`
		User    string `json:"user"`
	} `json:"context"`
}

func (c *Cluster) writeKubeconfig(path, user, token string) error {
	kc := kubeconfig{APIVersion: "v1", Kind: "Config", CurrentContext: "test"}
	cl := kubeconfigCluster{Name: "test"}
	cl.Cluster.Server = c.Host
	cl.Cluster.CertificateAuthorityData = c.pki.caCertPEM
	u := kubeconfigUser{Name: user}
	u.User.Token = token
	ctx := kubeconfigContext{Name: "test"}
	ctx.Context.Cluster, ctx.Context.User = "test", user
	kc.Clusters, kc.Users, kc.Contexts = []kubeconfigCluster{cl}, []kubeconfigUser{u}, []kubeconfigContext{ctx}
	b, err := json.MarshalIndent(kc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// ConfigFor returns a rest.Config for the cluster that authenticates with
// token (e.g. from a TokenRequest).
func (c *Cluster) ConfigFor(token string) *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.BearerToken = token
	return cfg
}

func tlsConfigWithCA(caPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in CA PEM")
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
