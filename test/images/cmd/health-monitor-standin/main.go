// Command health-monitor-standin stands in for kubernetes-csi's
// external-health-monitor-controller sidecar in the one-node cluster, under the image name
// csi-driver-host-path's manifests give it, because the Go module proxy does not serve that
// module. It takes the flags those manifests pass, waits until the driver answers, says so, and
// then only waits for SIGTERM: it monitors no volume and writes no event. It exists so that the
// driver's pod, deployed from its own unmodified manifests, has every container running.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/csi-resizer/csi-resizer/test/images/internal/csiclient"
)

func main() {
	address := flag.String("csi-address", "/run/csi/socket", "CSI driver socket")
	flag.Bool("leader-election", false, "accepted for compatibility (there is nothing to elect)")
	flag.String("leader-election-namespace", "", "accepted for compatibility")
	flag.String("http-endpoint", "", "accepted for compatibility")
	flag.Duration("timeout", 15*time.Second, "accepted for compatibility")
	flag.Duration("monitor-interval", time.Minute, "accepted for compatibility")
	flag.Int("v", 0, "log level (accepted for compatibility)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	conn, err := csiclient.Dial(*address)
	if err != nil {
		log.Fatalf("health-monitor-standin: %v", err)
	}
	driver, err := csiclient.WaitForDriverName(ctx, conn, *address)
	if err != nil {
		log.Printf("health-monitor-standin: %v", err)
		os.Exit(1)
	}
	log.Printf("health-monitor-standin: driver %s answers; this stand-in monitors no volume health", driver)
	<-ctx.Done()
}
