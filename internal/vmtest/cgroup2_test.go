package vmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// guestRuns are the test binaries' runs in the guest: the tests whose
// code differs between cgroup v1 and v2 (job cgroups, limits, OOM and
// pids reporting, cleanup, warm pools, the host's backstop cgroup, the
// stale sweep, egress by cgroup), and each must pass there (a skip fails
// it: the guest sets MOAT_REQUIRE_TOOLS=1 and MOAT_REQUIRE_CGROUP_V2=1).
// Left out: tests that build Go code at run time (the guest has no Go
// toolchain: the supervisor and launcher tests, the hostile syscall
// probes, TestSlimWrapper, whose wrapper the TestV2* tests run instead),
// and tests with nothing of cgroups in them, which the host runs. The
// pool's dead-wrapper tests run here too: under emulation a dying wrapper
// is often still alive when its spec is written, the race that made a
// claim count before the wrapper acknowledged it.
var guestRuns = []struct {
	name, bin string
	tests     []string // top-level tests; "Test/sub" selects one subtest
}{
	{"kernel", "kernel", []string{"TestV2JobCgroup", "TestV2HostCgroup", "TestV2RemoveStaleCgroups",
		"TestCgroupLifecycle", "TestEgressAllowsOnlyTargets", "TestEgressForCgroup", "TestEgressForCgroupRefuses", "TestJobCgroupNames"}},
	{"native", "native", []string{"TestV2JobBornInCgroup", "TestV2Limits", "TestV2NothingLeftBehind",
		"TestMemoryLimit", "TestForkBomb", "TestTimeout", "TestContextCancel", "TestPool",
		"TestSetupErrors", "TestJobDirWritable", "TestStdinOutputAndTruncation", "TestAllowNet", "TestAllowNetHostile",
		"TestPoolDeadWrappers", "TestPoolClaimNeedsAck", "TestJobEndLeavesNothing", "TestSweepReapsDeadRunner"}},
}

// runPattern is the -test.run pattern selecting tests.
func runPattern(tests []string) string {
	var top, sub []string
	for _, t := range tests {
		name, s, _ := strings.Cut(t, "/")
		top = append(top, name)
		if s != "" {
			sub = append(sub, s)
		}
	}
	p := "^(" + strings.Join(top, "|") + ")$"
	if len(sub) > 0 {
		p += "/^(" + strings.Join(sub, "|") + ")$"
	}
	return p
}

// TestCgroupV2 boots Debian's kernel with only the unified cgroup
// hierarchy (cgroup_no_v1=all) and runs the tests of host/native and
// policy/kernel there, as root: the native runner's jobs born in their
// cgroup, memory, pids and CPU limits, OOM reporting, cleanup, the host's
// backstop cgroup and the stale-cgroup sweep, on the cgroup version
// production hosts run. Each test's verdict in the guest is a subtest
// here.
func TestCgroupV2(t *testing.T) {
	skip := func(format string, args ...any) {
		t.Helper()
		testenv.Require(t, fmt.Sprintf(format, args...))
	}
	if testing.Short() {
		t.Skip("boots a VM (-short)")
	}
	if os.Geteuid() != 0 {
		skip("needs root: the guest's tests are the root ones, and virtio-9p shares /etc")
	}
	qemu, accel, err := Available()
	if err != nil {
		skip("%v", err)
	}
	root := repoRoot(t)
	k, err := FindKernel(filepath.Join(root, ".cache", "vmkernel"))
	if err != nil {
		skip("%v", err)
	}
	bootMods, err := k.ModuleClosure("virtio_pci", "9pnet_virtio", "9p")
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	dir := t.TempDir()
	bins := buildAll(t, root, dir)
	buildTime := time.Since(start)

	testEnv := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "TMPDIR=/tmp", "LANG=C.UTF-8",
		"MOAT_REQUIRE_TOOLS=1", "MOAT_REQUIRE_CGROUP_V2=1", "MOAT_CONFINE_WRAPPER=/moat/moat-confine"}
	var runs []GuestRun
	for _, r := range guestRuns {
		runs = append(runs, GuestRun{Name: r.name, Path: "/moat/" + r.bin + ".test", Env: testEnv, Timeout: Duration(240 * time.Second),
			Args: []string{"-test.v", "-test.count=1", "-test.timeout=230s", "-test.run=" + runPattern(r.tests)}})
	}
	m := Machine{
		Kernel: k, QEMU: qemu, Accel: accel, MemMiB: 1536, CPUs: 2, Init: bins["init"], Scratch: dir,
		// cgroup_no_v1=all: no v1 controller can be mounted, as on a
		// systemd host in unified mode.
		Cmdline: []string{"cgroup_no_v1=all", "systemd.unified_cgroup_hierarchy=1"},
		Files: map[string]string{
			"/moat/native.test":         bins["native"],
			"/moat/kernel.test":         bins["kernel"],
			"/moat/moat-confine":        bins["moat-confine"],
			"/boot/config-" + k.Release: k.Config,
		},
		Guest: GuestConfig{
			Shares: []Share{
				{Tag: "usr", Host: "/usr", Mount: "/usr"},
				{Tag: "etc", Host: "/etc", Mount: "/etc"},
				{Tag: "kmods", Host: k.Root, Mount: "/kmods"},
			},
			ModulesDir: "/kmods",
			Runs:       runs,
		},
	}
	m.Guest.BootModules = bootMods

	// Under TCG emulation (this machine kind) the two runs take ~70 s on
	// a quiet machine and passed 170 s on a loaded one: the bound is for a
	// guest that hangs, not a slow one.
	ctx, cancel := context.WithTimeout(context.Background(), 480*time.Second)
	defer cancel()
	out, err := m.Boot(ctx)
	if out != nil {
		t.Cleanup(func() {
			// On failure, keep the guest's whole console and results.
			if t.Failed() {
				log := filepath.Join(os.TempDir(), "moat-vmtest-console.log")
				if os.WriteFile(log, []byte(out.Console+"\n---- results ----\n"+out.Results), 0o644) == nil {
					t.Logf("guest console and results: %s", log)
				}
			}
		})
	}
	if err != nil {
		t.Fatalf("%v\nconsole (tail):\n%s\nresults (tail):\n%s", err, tail(out.Console, 60), tail(out.Results, 60))
	}
	if fail := strings.Index(out.Results, MarkFail); fail >= 0 {
		t.Fatalf("the guest's /init failed: %s\nconsole (tail):\n%s", strings.SplitN(out.Results[fail:], "\n", 2)[0], tail(out.Console, 40))
	}
	if !out.Done {
		t.Fatalf("the guest did not finish its runs\nconsole (tail):\n%s\nresults (tail):\n%s", tail(out.Console, 60), tail(out.Results, 60))
	}
	t.Logf("guest kernel %s (qemu accel %s); /init started at %.2fs uptime; build %s, boot to power-off %s; LSMs %s; cgroup2 controllers %q",
		out.Release, accel, out.BootUptime.Seconds(), buildTime.Round(time.Millisecond), out.Wall.Round(time.Millisecond),
		out.Info["lsm"], out.Info["cgroup.controllers"])
	if out.Info["cgroupfs.magic"] != "0x63677270" {
		t.Fatalf("/sys/fs/cgroup in the guest is not cgroup2 (statfs magic %s)", out.Info["cgroupfs.magic"])
	}
	for _, ctl := range []string{"memory", "pids", "cpu"} {
		if !strings.Contains(" "+out.Info["cgroup.controllers"]+" ", " "+ctl+" ") {
			t.Fatalf("the guest's cgroup2 root lacks the %s controller: %q", ctl, out.Info["cgroup.controllers"])
		}
	}

	for _, gr := range guestRuns {
		pkg := gr.name
		t.Run(pkg, func(t *testing.T) {
			text := out.RunOutput(pkg)
			results := ParseGoTest(text)
			if len(results) == 0 {
				t.Fatalf("%s ran no test in the guest:\n%s", pkg, tail(text, 40))
			}
			t.Logf("%s in the guest: exit %d in %s, %d tests and subtests", pkg, out.Exits[pkg], out.RunTime[pkg].Round(time.Millisecond), len(results))
			names := make([]string, 0, len(results))
			for n := range results {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				r := results[n]
				t.Run(n, func(t *testing.T) {
					switch r.Verdict {
					case "FAIL":
						t.Errorf("FAIL under cgroup v2:\n%s", r.Output)
					case "SKIP":
						t.Logf("skipped under cgroup v2:\n%s", r.Output)
					}
				})
			}
			for _, n := range gr.tests {
				if r, ok := results[n]; !ok || r.Verdict != "PASS" {
					t.Errorf("%s: %q under cgroup v2, want PASS\n%s", n, r.Verdict, r.Output)
				}
			}
			if code, ok := out.Exits[pkg]; !ok || code != 0 {
				t.Errorf("%s exited %d in the guest\n%s", pkg, code, tail(text, 30))
			}
		})
	}
}

// buildAll builds the guest's binaries, static: /init, the two test
// binaries and the slim wrapper.
func buildAll(t *testing.T, root, dir string) map[string]string {
	t.Helper()
	targets := []struct {
		name, pkg string
		test      bool
	}{
		{"init", "./internal/vmtest/guestinit", false},
		{"moat-confine", "./cmd/moat-confine", false},
		{"native", "./host/native", true},
		{"kernel", "./policy/kernel", true},
	}
	out := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	for i, tg := range targets {
		path := filepath.Join(dir, tg.name)
		out[tg.name] = path
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"build", "-o", path, tg.pkg}
			if tg.test {
				args = []string{"test", "-c", "-o", path, tg.pkg}
			}
			cmd := exec.Command("go", args...)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
			if msg, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				errs[i] = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(b)))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
