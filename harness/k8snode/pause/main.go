// The pod sandbox's process, as Kubernetes' own pause: it holds the pod's
// namespaces, reaps orphans (it is PID 1 of the pod), and exits on
// SIGINT/SIGTERM. Built here (static, no libc) because no registry's
// pause image can be pulled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
