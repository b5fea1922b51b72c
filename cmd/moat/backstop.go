package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// A confined host lives in a backstop cgroup (moat/host-<pid>, see
// kernel.ConfineHost): a memory and process ceiling for the whole host, in
// case an invocation drove the host itself past every per-invocation
// bound. The kernel's answer at that ceiling is a SIGKILL, which the host
// cannot report. So before it confines itself, the host starts a watcher:
// this binary again, outside the cgroup, holding the read end of a pipe
// whose write end only the host holds. When the host is gone, for any
// reason, the pipe reads EOF; the watcher then looks at the cgroup, and if
// the OOM killer ended the host there, says so (one line on stderr, naming
// the ceiling) and records it in the audit trail, then removes the cgroup,
// which the host, being in it, never could.

// backstopEnv carries a backstopWatch to the watcher process.
const backstopEnv = "MOAT_BACKSTOP_WATCH"

// backstopWatch is what the watcher needs: whose cgroup, the store to
// audit into, and the name to report under.
type backstopWatch struct {
	HostPID int    `json:"host_pid"`
	Cgroup  string `json:"cgroup"` // kernel.HostCgroupName of the host`
	Store   string `json:"store"`  // the host's store: its data dir, or its database URL
	Who     string `json:"who"`    // "moat run", "moat serve"
	// LogFormat is the host's log format: a json host's watcher writes
	// its lines as JSON records too.
	LogFormat string `json:"log_format,omitempty"`
}

// say writes one line of the watcher on stderr, in the host's log format.
func (w backstopWatch) say(level slog.Level, msg string, attrs ...slog.Attr) {
	if w.LogFormat == "json" {
		slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{ReplaceAttr: host.SafeLogAttr})).LogAttrs(context.Background(), level, msg, attrs...)
		return
	}
	line := "moat: " + msg
	for _, a := range attrs {
		line += ": " + a.Value.String()
	}
	fmt.Fprintln(os.Stderr, line)
}

// startBackstopWatch starts the watcher of the calling process's backstop
// cgroup. Call it before the host confines itself (execve is denied
// after). The returned file is the pipe's write end: keep it open for the
// life of the host (closing it tells the watcher the host is gone).
func startBackstopWatch(who, storeLocation string) (*os.File, error) {
	if os.Geteuid() != 0 {
		return nil, nil // no cgroup without root: nothing to watch
	}
	name, err := kernel.HostCgroupName(os.Getpid())
	if err != nil {
		return nil, err
	}
	js, err := json.Marshal(backstopWatch{HostPID: os.Getpid(), Cgroup: name, Store: storeLocation, Who: who, LogFormat: logFormat})
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe", "moat-backstop-watch")
	cmd.Env = append(os.Environ(), backstopEnv+"="+string(js))
	cmd.ExtraFiles = []*os.File{r} // fd 3
	cmd.Stderr = os.Stderr
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("backstop watcher: %w", err)
	}
	go cmd.Wait() // reaped if the host outlives it; orphaned (and fine) otherwise
	return w, nil
}

// backstopWatchMain is the watcher; it returns at once in any other moat
// process.
func backstopWatchMain() {
	raw, ok := os.LookupEnv(backstopEnv)
	if !ok {
		return
	}
	var w backstopWatch
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		fmt.Fprintf(os.Stderr, "moat: backstop watcher: %v\n", err)
		os.Exit(2)
	}
	// A signal to the host's whole process group or service (Ctrl-C,
	// systemd's stop) is the host's to act on: the watcher reports after
	// the host is gone, so it outlives such a signal.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	_, _ = io.Copy(io.Discard, os.NewFile(3, "host-alive")) // until the host is gone
	os.Exit(w.report())
}

// report checks the host's cgroup after the host has gone, reports an OOM
// kill, and removes the cgroup.
func (w backstopWatch) report() int {
	cg, err := kernel.OpenJobCgroup(w.Cgroup)
	if err != nil {
		return 0 // the host never joined one (not root, cgroups unavailable, --confine=off)
	}
	_, oom, pidsHit, _ := cg.Stats()
	limit := cg.MemoryLimit()
	_ = cg.Destroy()
	if !oom && !pidsHit {
		return 0
	}
	reason := fmt.Sprintf("%s was killed by its memory backstop: the host process reached its ceiling of %d MiB (cgroup moat/%s; "+
		"raise it with --host-memory-mib), so the kernel's OOM killer ended it and the invocations in flight were lost",
		w.Who, limit>>20, w.Cgroup)
	if !oom {
		reason = fmt.Sprintf("%s reached its backstop's process limit (moat/%s): a thread or process could not be created", w.Who, w.Cgroup)
	}
	w.say(slog.LevelError, reason)
	if st, err := store.Open(context.Background(), w.Store); err == nil {
		ev := audit.Event{ID: audit.NewID(), Kind: audit.KindConfinement, Decision: audit.Deny, Module: w.Who,
			Rule: "backstop", Reason: reason, Attrs: map[string]string{"host_pid": strconv.Itoa(w.HostPID), "memory_limit": strconv.FormatInt(limit, 10)}}
		if err := st.AuditInsert(context.Background(), []store.AuditEvent{ev}); err != nil {
			w.say(slog.LevelError, "backstop watcher: audit", slog.String("err", err.Error()))
		}
		st.Close()
	}
	return 0
}
