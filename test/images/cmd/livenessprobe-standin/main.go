// Command livenessprobe-standin stands in for kubernetes-csi's livenessprobe sidecar in the
// one-node cluster, under the image name csi-driver-host-path's manifests give it, because the
// Go module proxy does not serve that module. It takes the flags those manifests pass and
// answers GET /healthz on --health-port with 200 when the driver's CSI Probe says it is ready
// and 500 otherwise, which is what the driver container's livenessProbe needs. It is not
// upstream's code and has none of its other features (metrics, --http-endpoint on another
// address than the health port's).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/csi-resizer/csi-resizer/test/images/internal/csiclient"
)

func main() {
	address := flag.String("csi-address", "/run/csi/socket", "CSI driver socket")
	port := flag.String("health-port", "9808", "port of the /healthz endpoint")
	endpoint := flag.String("http-endpoint", "", "address of the /healthz endpoint (overrides --health-port)")
	timeout := flag.Duration("probe-timeout", time.Second, "timeout of one CSI Probe call")
	flag.Int("v", 0, "log level (accepted for compatibility)")
	flag.Parse()

	conn, err := csiclient.Dial(*address)
	if err != nil {
		log.Fatalf("livenessprobe-standin: %v", err)
	}
	addr := *endpoint
	if addr == "" {
		addr = ":" + *port
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), *timeout)
		defer cancel()
		resp, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
		switch {
		case err != nil:
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "probe failed: %v\n", err)
		case resp.GetReady() != nil && !resp.GetReady().GetValue():
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintln(w, "driver not ready")
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	log.Printf("livenessprobe-standin: serving /healthz on %s for the driver at %s", addr, *address)
	if err := http.ListenAndServe(addr, nil); err != nil {
		log.Printf("livenessprobe-standin: %v", err)
		os.Exit(1)
	}
}
