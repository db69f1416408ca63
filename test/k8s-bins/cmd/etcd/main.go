// Command etcd is the unmodified etcd server (go.etcd.io/etcd/server/v3), built
// from the module proxy so the integration tests need no downloaded release binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
