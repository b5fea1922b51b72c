// Command podhostile is what image_test.go runs as a native job in the
// image, as an attacker would: each mode tries what the job's layers must
// refuse and prints one line per attempt, "what: result", result being
// "ok" or the errno's text. Built static by the test (CGO_ENABLED=0).
package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: podhostile read|write|forkbomb|sleep")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "sleep":
		time.Sleep(30 * time.Second)
	case "read":
		// Outside the job: the server's environment and memory (pid 1 of
		// the pod), its configuration and Secret, its data directory.
		for _, p := range []string{"/proc/1/environ", "/proc/1/mem", "/proc/1/root/etc/passwd", "/etc/moat/server.yaml", "/run/secrets/moat/code-key", "/var/lib/moat"} {
			f, err := os.Open(p)
			if err == nil {
				b := make([]byte, 1)
				_, err = f.Read(b)
				f.Close()
			}
			report("read "+p, err)
		}
	case "write":
		for _, p := range []string{"/usr/local/bin/planted", "/etc/planted", "/tmp/../usr/planted", os.Args[0] + ".planted", "/proc/sys/kernel/hostname"} {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
			if err == nil {
				_, err = f.Write([]byte("x"))
				f.Close()
			}
			report("write "+p, err)
		}
		home, _ := os.UserHomeDir()
		report("write $HOME/own", os.WriteFile(home+"/own", []byte("x"), 0o644))
	case "forkbomb":
		n := 0
		var err error
		for n < 100000 {
			_, err = syscall.ForkExec("/proc/self/exe", []string{os.Args[0], "sleep"}, &syscall.ProcAttr{})
			if err != nil {
				break
			}
			n++
		}
		fmt.Printf("forkbomb started: %d\n", n)
		report("forkbomb", err)
	}
}

func report(what string, err error) {
	var errno syscall.Errno
	switch {
	case err == nil:
		fmt.Printf("%s: ok\n", what)
	case errors.As(err, &errno):
		fmt.Printf("%s: %s\n", what, errno.Error())
	default:
		fmt.Printf("%s: %v\n", what, err)
	}
}
