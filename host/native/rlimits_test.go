package native

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// TestRlimitsProcs: RLIMIT_NPROC adds the processes a shared uid already
// has to the job's budget, and nothing for a uid leased to the job alone
// (whose count would be a walk of /proc per job for a known zero). A
// process of the uid is running throughout, so a count that is skipped
// shows.
func TestRlimitsProcs(t *testing.T) {
	testenv.Root(t, "a leased uid needs root (without root the job keeps the caller's uid, always counted)")
	const uid = UIDBase - 7 // outside the leased range, no process of its own but ours
	sleeper := exec.Command("sleep", "30")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for countProcs(uid) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the uid's process never showed in /proc")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		spec Spec
		want uint64
	}{
		{"leased uid: not counted", Spec{Pids: 10}, 10 + 8},
		{"given uid: its processes counted", Spec{Pids: 10, UID: uid}, 10 + 8 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rlimitsFor(withDefaults(tc.spec), true, uid, true).Procs; got != tc.want {
				t.Errorf("RLIMIT_NPROC %d, want %d", got, tc.want)
			}
		})
	}
}
