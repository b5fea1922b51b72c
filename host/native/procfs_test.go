package native

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
)

// TestProcPlans runs a job under each /proc plan kernel.NativeProc can
// give: fresh (the job's pid namespace only: it is pid 1 there), bound
// (the caller's /proc, as in a pod with MOAT_NATIVE_PROC=bind: /proc/self
// still names the job, the run's Unavailable says what it sees), and
// refused (a masked /proc without the setting: no job starts, and the
// error names the setting).
func TestProcPlans(t *testing.T) {
	testenv.Root(t, "the job's root is built as root here; the pod's unprivileged path is TestImage's")
	// moat's own wrapper, static as released: a test binary built with
	// cgo would restrict its threads through libpsx instead.
	wrapper := buildWrapper(t)
	for _, tc := range []struct {
		name  string
		plan  kernel.ProcPlan
		fresh bool // /proc/self is 1: the job is the init of its pid namespace's own proc
		note  bool
		err   string
	}{
		{"fresh", kernel.ProcPlan{}, true, false, ""},
		{"bound", kernel.ProcPlan{Bind: true, Masked: []string{"/proc/kcore"}, Note: "procfs: the pod's /proc is bound (test)"}, false, true, ""},
		{"refused", kernel.ProcPlan{Masked: []string{"/proc/kcore"}, Err: errors.New("set MOAT_NATIVE_PROC=bind (test)")}, false, false, "MOAT_NATIVE_PROC=bind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := nativeProc
			nativeProc = func() kernel.ProcPlan { return tc.plan }
			t.Cleanup(func() { nativeProc = prev })
			if err := Usable(); (err == nil) != (tc.err == "") {
				t.Errorf("Usable: %v", err)
			}
			run := func(cmd ...string) *Result {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := Run(ctx, Spec{Command: cmd, Wrapper: wrapper})
				if tc.err != "" {
					if err == nil || !strings.Contains(err.Error(), tc.err) {
						t.Fatalf("err %v, want a refusal naming %q (result %+v)", err, tc.err, res)
					}
					return nil
				}
				if err != nil {
					t.Fatalf("run %q: %v", cmd, err)
				}
				return res
			}
			res := run("readlink", "/proc/self")
			if res == nil {
				return
			}
			if res.Status != StatusOK {
				t.Fatalf("readlink /proc/self: %s %s %s", res.Status, res.Stderr, res.Reason)
			}
			self := strings.TrimSpace(string(res.Stdout))
			if (self == "1") != tc.fresh {
				t.Errorf("/proc/self is %q in the job: fresh %v, want %v", self, self == "1", tc.fresh)
			}
			if got := slices.ContainsFunc(res.Unavailable, func(u string) bool { return strings.HasPrefix(u, "procfs:") }); got != tc.note {
				t.Errorf("unavailable %q: procfs note %v, want %v", res.Unavailable, got, tc.note)
			}
			if !slices.Contains(res.Layers, "pidns") {
				t.Errorf("layers %q lack pidns", res.Layers)
			}
			// Either way Landlock keeps /proc from the job: no listing of
			// the processes, no reading of their status or command lines.
			for _, cmd := range [][]string{{"ls", "/proc"}, {"cat", "/proc/1/cmdline"}, {"cat", "/proc/self/status"}} {
				r := run(cmd...)
				if r.Status == StatusOK || !strings.Contains(string(r.Stderr), "Permission denied") {
					t.Errorf("%q in the job: %s, stdout %q stderr %q; want Permission denied", cmd, r.Status, r.Stdout, r.Stderr)
				}
			}
		})
	}
}
