// Package cluster gives tests the one-node cluster of hack/cluster (docs/cluster.md): a real
// kubelet, containerd and kube-proxy next to etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, in network and mount namespaces of their own, with the images assembled
// offline. Start brings one up for a test (and removes it when the test ends); Running uses
// one that `make cluster` left running.
//
// The cluster needs root, network and mount namespaces and cgroups; Available says why not
// when they are missing, so that a test can skip in one line.
//
// Tests that start a cluster are built with the "cluster" tag (`go test -tags cluster
// ./test/cluster/`); this package itself has no tag so that the unit run compiles and vets it.
package cluster

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// EnvKeep, set to 1, leaves a cluster Start brought up running after the test (for a look at
// it; `CLUSTER_NAME=<name> make cluster-down` removes it).
const EnvKeep = "CSI_RESIZER_CLUSTER_KEEP"

// Options select the cluster's name and addresses; the zero value is the test cluster
// csi-resizer-test, separate from the person's csi-resizer-node of `make cluster`.
type Options struct {
	// Name names the network namespace, the cgroups and the node (default csi-resizer-test).
	Name string
	// Dir holds every file of the cluster (default /var/tmp/<Name>).
	Dir string
	// Net is the first three octets of the /30 between the machine and the node
	// (default 10.213.1).
	Net string
	// Veth is the machine's end of that link (default crtest0).
	Veth string
}

// withDefaults fills what opts leaves empty from the environment (CLUSTER_NAME, CLUSTER_NET,
// CLUSTER_VETH, as `make cluster` reads them; so that two checkouts can test side by side),
// else from the test cluster's defaults.
func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = os.Getenv("CLUSTER_NAME")
	}
	if o.Net == "" {
		o.Net = os.Getenv("CLUSTER_NET")
	}
	if o.Veth == "" {
		o.Veth = os.Getenv("CLUSTER_VETH")
	}
	if o.Name == "" {
		o.Name = "csi-resizer-test"
	}
	if o.Dir == "" {
		o.Dir = "/var/tmp/" + o.Name
	}
	if o.Net == "" {
		o.Net = "10.213.1"
	}
	if o.Veth == "" {
		o.Veth = "crtest0"
	}
	return o
}

func (o Options) env() []string {
	return append(os.Environ(),
		"CLUSTER_NAME="+o.Name, "CLUSTER_DIR="+o.Dir, "CLUSTER_NET="+o.Net, "CLUSTER_VETH="+o.Veth)
}

// Cluster is a running one-node cluster. Client and Config are the admin's (system:masters).
type Cluster struct {
	Name       string
	Dir        string
	Kubeconfig string // admin kubeconfig, usable from the machine
	KubectlBin string
	Server     string // https://<node ip>:6443
	NodeName   string
	NodeIP     string
	// ProductImage is this checkout's image as imported, e.g. csi-resizer:v0.3.0-12-gabcdef0.
	ProductImage string
	Config       *rest.Config
	Client       kubernetes.Interface
	// StartTime is how long up.sh took (builds included).
	StartTime time.Duration

	env  map[string]string
	opts Options
}

// Available returns why a cluster cannot run on this machine, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("the one-node cluster needs root")
	}
	for _, p := range []string{"/proc/self/ns/net", "/proc/self/ns/mnt", "/sys/fs/cgroup"} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("the one-node cluster needs %s: %v", p, err)
		}
	}
	for _, c := range []string{"ip", "nsenter", "unshare", "mount"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("the one-node cluster needs %s: %v", c, err)
		}
	}
	return nil
}

// Start brings up a cluster (hack/cluster/up.sh: a cold build of its parts takes minutes, a
// warm start about half a minute) and removes it when the test ends, unless EnvKeep is 1. A
// cluster of the same name left by an earlier run is removed first.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Up(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// Up is Start for a cluster that outlives one test (TestMain): Down removes it.
func Up(opts Options) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	root, err := framework.RepoRoot()
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	out, err := runScript(root, opts, "up.sh")
	if err != nil {
		return nil, fmt.Errorf("hack/cluster/up.sh: %v\n%s", err, tail(out, 60))
	}
	c, err := load(opts)
	if err != nil {
		return nil, err
	}
	c.StartTime = time.Since(begin)
	return c, nil
}

// Down removes the cluster (hack/cluster/down.sh), unless EnvKeep is 1.
func (c *Cluster) Down() error {
	if os.Getenv(EnvKeep) == "1" {
		fmt.Fprintf(os.Stderr, "%s=1: cluster %s left running (CLUSTER_NAME=%s CLUSTER_DIR=%s CLUSTER_NET=%s CLUSTER_VETH=%s make cluster-down)\n",
			EnvKeep, c.opts.Name, c.opts.Name, c.opts.Dir, c.opts.Net, c.opts.Veth)
		return nil
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	if out, err := runScript(root, c.opts, "down.sh"); err != nil {
		return fmt.Errorf("hack/cluster/down.sh: %v\n%s", err, tail(out, 30))
	}
	return nil
}

// Running returns the cluster `make cluster` (or Start with EnvKeep=1) left running under
// opts' name, or skips the test when there is none.
func Running(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "csi-resizer-node"
		if opts.Net == "" {
			opts.Net = "10.213.0"
		}
		if opts.Veth == "" {
			opts.Veth = "crnode0"
		}
	}
	opts = opts.withDefaults()
	c, err := load(opts)
	if err != nil {
		t.Skipf("no running cluster %s: %v", opts.Name, err)
	}
	return c
}

func runScript(root string, opts Options, script string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(root, "hack", "cluster", script))
	cmd.Dir = root
	cmd.Env = opts.env()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// load reads the cluster.env file up.sh writes.
func load(opts Options) (*Cluster, error) {
	f, err := os.Open(filepath.Join(opts.Dir, "cluster.env"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	c := &Cluster{
		Name: env["CLUSTER_NAME"], Dir: env["CLUSTER_DIR"], Kubeconfig: env["KUBECONFIG"],
		KubectlBin: env["KUBECTL"], Server: env["SERVER"], NodeName: env["NODE_NAME"], NodeIP: env["NODE_IP"],
		ProductImage: env["PRODUCT_IMAGE"], env: env, opts: opts,
	}
	c.Config = &rest.Config{
		Host: c.Server,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: env["CA_FILE"], CertFile: env["ADMIN_CERT"], KeyFile: env["ADMIN_KEY"],
		},
		QPS: 100, Burst: 200,
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// Kubectl runs kubectl with the admin kubeconfig and returns its stdout; the error carries
// stderr.
func (c *Cluster) Kubectl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return c.KubectlWithInput(t, "", args...)
}

// KubectlWithInput is Kubectl with stdin.
func (c *Cluster) KubectlWithInput(t testing.TB, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(c.KubectlBin, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// InNode runs a command in the node's network and mount namespaces (what the kubelet and
// containerd see) and returns its combined output.
func (c *Cluster) InNode(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + c.env["NETNS"],
		"--mount=" + filepath.Join(c.Dir, "ns", "mnt"), "--"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// DeployHostpath deploys csi-driver-host-path with its own manifests
// (hack/cluster/deploy-hostpath.sh) and a StorageClass csi-hostpath-sc.
func (c *Cluster) DeployHostpath(t testing.TB) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := runScript(root, c.opts, "deploy-hostpath.sh")
	if err != nil {
		t.Fatalf("hack/cluster/deploy-hostpath.sh: %v\n%s", err, tail(out, 60))
	}
}

// LogPath is the log file of a component of the node (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy).
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.Dir, "logs", component+".log")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
