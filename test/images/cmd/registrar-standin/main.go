// Command registrar-standin stands in for kubernetes-csi's node-driver-registrar sidecar in the
// one-node cluster, under the image name csi-driver-host-path's manifests give it, because the
// Go module proxy does not serve that module. It does what the kubelet needs from it: it asks
// the driver its name, serves the kubelet's plugin registration API (pluginregistration/v1) on
// <--plugin-registration-path>/<driver>-reg.sock, answering with --kubelet-registration-path as
// the driver's endpoint, and serves GET /healthz on --http-endpoint (200 while the registration
// socket exists and the kubelet has not refused the plugin). It takes the flags those manifests
// pass; it is not upstream's code and has none of its other modes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/csi-resizer/csi-resizer/test/images/internal/csiclient"
)

type registration struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string

	mu       sync.Mutex
	refused  string // the kubelet's error, once it refused the plugin
	accepted bool
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	log.Printf("kubelet asked for the plugin info: %s at %s", r.driver, r.endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.driver,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.PluginRegistered {
		log.Printf("kubelet registered %s", r.driver)
		r.accepted, r.refused = true, ""
	} else {
		log.Printf("kubelet refused %s: %s", r.driver, s.Error)
		r.refused = s.Error
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func main() {
	address := flag.String("csi-address", "/run/csi/socket", "CSI driver socket, as this container sees it")
	kubeletPath := flag.String("kubelet-registration-path", "", "the driver's socket as the kubelet sees it")
	regDir := flag.String("plugin-registration-path", "/registration", "the kubelet's plugins_registry directory, as this container sees it")
	endpoint := flag.String("http-endpoint", "", "address of /healthz (empty: none)")
	flag.Duration("timeout", time.Second, "accepted for compatibility")
	flag.Int("v", 0, "log level (accepted for compatibility)")
	flag.Parse()
	if *kubeletPath == "" {
		log.Fatal("registrar-standin: --kubelet-registration-path is required")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	conn, err := csiclient.Dial(*address)
	if err != nil {
		log.Fatalf("registrar-standin: %v", err)
	}
	driver, err := csiclient.WaitForDriverName(ctx, conn, *address)
	if err != nil {
		log.Fatalf("registrar-standin: %v", err)
	}
	_ = conn.Close()

	reg := &registration{driver: driver, endpoint: *kubeletPath}
	sock := filepath.Join(*regDir, driver+"-reg.sock")
	// A socket left by a previous container would make Listen fail.
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		log.Fatalf("registrar-standin: remove stale %s: %v", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatalf("registrar-standin: %v", err)
	}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, reg)
	go func() {
		if err := srv.Serve(lis); err != nil {
			log.Printf("registrar-standin: serve: %v", err)
		}
	}()
	log.Printf("registrar-standin: %s registers at %s with endpoint %s", driver, sock, *kubeletPath)

	if *endpoint != "" {
		http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			reg.mu.Lock()
			refused := reg.refused
			reg.mu.Unlock()
			if _, err := os.Stat(sock); err != nil {
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprintf(w, "registration socket: %v\n", err)
				return
			}
			if refused != "" {
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprintf(w, "kubelet refused the plugin: %s\n", refused)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		go func() {
			if err := http.ListenAndServe(*endpoint, nil); err != nil {
				log.Fatalf("registrar-standin: http: %v", err)
			}
		}()
	}
	<-ctx.Done()
	srv.Stop()
	_ = os.Remove(sock)
}
