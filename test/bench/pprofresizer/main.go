// Command pprofresizer is cmd/csi-resizer plus net/http/pprof on $BENCH_PPROF_ADDR, so the
// memory benchmark can take heap profiles of the very code it measures (BENCH_PPROF). It is a
// benchmark tool, not shipped.
package main

import (
	"net/http"
	_ "net/http/pprof" // the profiles on http.DefaultServeMux
	"os"
	"time"

	"github.com/csi-resizer/csi-resizer/pkg/sidecar"
)

func main() {
	if addr := os.Getenv("BENCH_PPROF_ADDR"); addr != "" {
		srv := &http.Server{Addr: addr, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.ListenAndServe() }()
	}
	os.Exit(sidecar.Main(os.Args[1:], "bench-pprof"))
}
