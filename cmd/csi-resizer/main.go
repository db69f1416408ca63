// Command csi-resizer is a drop-in replacement for the Kubernetes CSI external-resizer sidecar
// that makes volume expansion recoverable (KEP-1790) and observable. See pkg/sidecar.
package main

import (
	"os"

	"github.com/csi-resizer/csi-resizer/pkg/sidecar"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(sidecar.Main(os.Args[1:], version))
}
