// Command pause is the sandbox ("pause") container of the one-node cluster's pods: it holds the
// pod's namespaces and does nothing else. As PID 1 of the pod it reaps the zombies that
// containers sharing its PID namespace leave behind, and exits on SIGINT or SIGTERM, as the
// upstream pause does. Written here because no image can be pulled on this machine.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
