package kernel

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/testenv"
)

// The expectations below come from facts read independently of Probe
// (securityfs, the kernel config, statfs, /proc/cgroups, sysctls, the
// iptables binary), so on this machine kind (root, kernel 6.18, Landlock ABI
// 7, cgroup v1 hybrid, iptables-nft) they assert the real values, and
// elsewhere they follow what the machine actually offers.

// probeTestKernelConfig returns the CONFIG_ lines of /proc/config.gz, or nil.
func probeTestKernelConfig(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return nil
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "CONFIG_") {
			out[k] = strings.Trim(v, `"`)
		} else if strings.HasPrefix(line, "# CONFIG_") && strings.HasSuffix(line, " is not set") {
			out[strings.Fields(line)[1]] = "n"
		}
	}
	return out
}

// probeTestLandlockExpected says whether Landlock should be enabled, from
// securityfs, else the lsm= boot parameter, else the kernel config. ok is
// false when none of those can tell.
func probeTestLandlockExpected(t *testing.T) (want, ok bool) {
	t.Helper()
	if data, err := os.ReadFile("/sys/kernel/security/lsm"); err == nil {
		return slices.Contains(strings.Split(strings.TrimSpace(string(data)), ","), "landlock"), true
	}
	cfg := probeTestKernelConfig(t)
	if cfg != nil && cfg["CONFIG_SECURITY_LANDLOCK"] != "y" {
		return false, true
	}
	if cmdline, err := os.ReadFile("/proc/cmdline"); err == nil {
		for f := range strings.FieldsSeq(string(cmdline)) {
			if v, found := strings.CutPrefix(f, "lsm="); found {
				return slices.Contains(strings.Split(v, ","), "landlock"), true
			}
		}
	}
	if cfg != nil {
		return slices.Contains(strings.Split(cfg["CONFIG_LSM"], ","), "landlock"), true
	}
	return false, false
}

// probeTestKernelVersion parses uname's release: 6.18.44-... → 6, 18.
func probeTestKernelVersion(t *testing.T) (int, int) {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^(\d+)\.(\d+)`).FindStringSubmatch(unix.ByteSliceToString(u.Release[:]))
	if m == nil {
		return 0, 0
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major, minor
}

// probeTestMinLandlockABI is the ABI a mainline kernel of that version
// reports at least (distributions may backport more, never less).
func probeTestMinLandlockABI(major, minor int) int {
	v := major*1000 + minor
	for _, s := range []struct{ ver, abi int }{{6015, 7}, {6012, 6}, {6010, 5}, {6007, 4}, {6002, 3}, {5019, 2}, {5013, 1}} {
		if v >= s.ver {
			return s.abi
		}
	}
	return 0
}

var probeTestABIRe = regexp.MustCompile(`^ABI (\d+) `)

func probeTestLayers(t *testing.T, res ProbeResult) map[string]LayerStatus {
	t.Helper()
	var got []string
	m := map[string]LayerStatus{}
	for _, l := range res.Layers {
		got = append(got, l.Name)
		m[l.Name] = l
		if l.Available && l.Detail == "" {
			t.Errorf("%s: available without a detail", l.Name)
		}
		if !l.Available && (l.Missing == "" || l.Cost == "") {
			t.Errorf("%s: missing without why or cost: %+v", l.Name, l)
		}
		if l.Available && (l.Missing != "" || l.Cost != "") {
			t.Errorf("%s: available but with why/cost: %+v", l.Name, l)
		}
	}
	if want := ProbeLayerNames(); !slices.Equal(got, want) {
		t.Fatalf("layers %v, want %v", got, want)
	}
	return m
}

func probeTestIptablesBinary() string {
	if p, err := exec.LookPath("iptables"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/iptables", "/sbin/iptables"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func TestProbeRealValues(t *testing.T) {
	testenv.Timing(t)
	start := time.Now()
	res := Probe(context.Background())
	if d := time.Since(start); d >= time.Second {
		t.Errorf("Probe took %v, want well under 1s", d)
	}
	t.Logf("Probe took %v\n%s", time.Since(start), res.Table())
	layers := probeTestLayers(t, res)
	root := os.Geteuid() == 0
	if res.Root != root || res.UID != os.Getuid() {
		t.Errorf("Root=%v UID=%d, want %v %d", res.Root, res.UID, root, os.Getuid())
	}
	if got := layers[probeRoot].Available; got != root {
		t.Errorf("root layer available=%v, euid %d", got, os.Geteuid())
	}
	if res.Kernel == "" || strings.HasPrefix(res.Kernel, "unknown") {
		t.Errorf("kernel %q", res.Kernel)
	}

	t.Run("landlock", func(t *testing.T) { probeTestCheckLandlock(t, layers) })

	t.Run("seccomp", func(t *testing.T) {
		l := layers[probeSeccomp]
		data, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
		if err != nil {
			if _, err := os.Stat("/proc/sys/kernel/seccomp"); err != nil && !l.Available {
				return // no seccomp here, and Probe says so
			}
			t.Skipf("cannot tell independently: %v", err)
		}
		avail := strings.Fields(string(data))
		if !slices.Contains(avail, "errno") {
			if l.Available {
				t.Errorf("available, but actions_avail lacks errno: %q", avail)
			}
			return
		}
		if !l.Available {
			t.Fatalf("missing, but actions_avail is %q: %s", avail, l.Missing)
		}
		for _, a := range []string{"errno", "kill_process", "trap", "log", "user_notif"} {
			if slices.Contains(avail, a) != strings.Contains(l.Detail, " "+a) {
				t.Errorf("action %s: actions_avail %q, detail %q", a, avail, l.Detail)
			}
		}
	})

	t.Run("cgroup", func(t *testing.T) {
		l := layers[probeCgroup]
		var st unix.Statfs_t
		if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
			if l.Available {
				t.Errorf("available without /sys/fs/cgroup: %+v", l)
			}
			return
		}
		var wantMode string
		var st2 unix.Statfs_t
		memPids := false
		switch {
		case st.Type == unix.CGROUP2_SUPER_MAGIC:
			wantMode = "cgroup v2"
			c, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
			f := strings.Fields(string(c))
			memPids = slices.Contains(f, "memory") && slices.Contains(f, "pids")
		case unix.Statfs("/sys/fs/cgroup/unified", &st2) == nil && st2.Type == unix.CGROUP2_SUPER_MAGIC:
			wantMode = "cgroup v1 (hybrid)"
		default:
			wantMode = "cgroup v1"
		}
		if wantMode != "cgroup v2" {
			var a, b unix.Statfs_t
			memPids = unix.Statfs("/sys/fs/cgroup/memory", &a) == nil && a.Type == unix.CGROUP_SUPER_MAGIC &&
				unix.Statfs("/sys/fs/cgroup/pids", &b) == nil && b.Type == unix.CGROUP_SUPER_MAGIC
		}
		if !strings.HasPrefix(l.Detail, wantMode+";") {
			t.Errorf("detail %q, want mode %q", l.Detail, wantMode)
		}
		if !root {
			return // covered by TestProbeUnprivileged
		}
		if memPids != l.Available {
			t.Fatalf("memory and pids mounted=%v, available=%v: %+v", memPids, l.Available, l)
		}
		if memPids {
			m := regexp.MustCompile(`usable controllers ([^;]*)`).FindStringSubmatch(l.Detail)
			if m == nil || !slices.Contains(strings.Fields(m[1]), "memory") || !slices.Contains(strings.Fields(m[1]), "pids") {
				t.Errorf("detail %q does not list memory and pids as usable", l.Detail)
			}
		}
	})

	t.Run("namespaces", func(t *testing.T) {
		data, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
		if err != nil {
			t.Skipf("cannot tell independently: %v", err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		if n <= 0 {
			if layers[probeUserns].Available {
				t.Errorf("userns available with max_user_namespaces %d", n)
			}
			return
		}
		if !root {
			if v, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(v)) == "0" {
				t.Skip("unprivileged user namespaces are disabled")
			}
		}
		for _, name := range []string{probeUserns, probeNetns} {
			if l := layers[name]; !l.Available {
				t.Errorf("%s missing, but max_user_namespaces is %d: %s", name, n, l.Missing)
			}
		}
	})

	t.Run("iptables", func(t *testing.T) {
		l := layers[probeIptables]
		bin := probeTestIptablesBinary()
		if bin == "" {
			if l.Available || !strings.Contains(l.Missing, "apt-get install iptables") {
				t.Errorf("no iptables binary, but %+v", l)
			}
			return
		}
		ver, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Skipf("iptables --version: %v", err)
		}
		backend := "legacy backend"
		if strings.Contains(string(ver), "nf_tables") {
			backend = "nf_tables backend"
		}
		if !strings.HasPrefix(l.Detail, backend) {
			t.Errorf("detail %q, want it to start with %q (%s)", l.Detail, backend, strings.TrimSpace(string(ver)))
		}
		if !root {
			return
		}
		if cfg := probeTestKernelConfig(t); cfg != nil && cfg["CONFIG_NETFILTER_XT_MATCH_CGROUP"] == "n" {
			if l.Available {
				t.Errorf("available without CONFIG_NETFILTER_XT_MATCH_CGROUP: %+v", l)
			}
			return
		}
		if !l.Available || !strings.Contains(l.Detail, "-m cgroup --path works") {
			t.Errorf("as root with %s: %+v", bin, l)
		}
	})
}

func probeTestCheckLandlock(t *testing.T, layers map[string]LayerStatus) {
	t.Helper()
	l := layers[probeLandlock]
	want, known := probeTestLandlockExpected(t)
	if !known {
		t.Skip("cannot tell independently whether Landlock is enabled")
	}
	if !want {
		for _, n := range []string{probeLandlock, probeLandlockNet, probeLandlockScope} {
			if layers[n].Available {
				t.Errorf("%s available, but Landlock is not enabled: %+v", n, layers[n])
			}
		}
		return
	}
	if !l.Available {
		t.Fatalf("Landlock is enabled, but the layer is missing: %s", l.Missing)
	}
	m := probeTestABIRe.FindStringSubmatch(l.Detail)
	if m == nil {
		t.Fatalf("no ABI in %q", l.Detail)
	}
	abi, _ := strconv.Atoi(m[1])
	if minABI := probeTestMinLandlockABI(probeTestKernelVersion(t)); abi < minABI {
		t.Errorf("ABI %d, but this kernel has at least %d", abi, minABI)
	}
	if got := layers[probeLandlockNet].Available; got != (abi >= 4) {
		t.Errorf("landlock-net available=%v with ABI %d", got, abi)
	}
	if abi >= 4 && abi < 10 && !strings.Contains(layers[probeLandlockNet].Detail, "TCP only; UDP and MPTCP not covered: moat blocks MPTCP with seccomp") {
		t.Errorf("landlock-net detail %q lacks the TCP-only note", layers[probeLandlockNet].Detail)
	}
	if got := layers[probeLandlockScope].Available; got != (abi >= 6) {
		t.Errorf("landlock-scope available=%v with ABI %d", got, abi)
	}
}

// probeTestLeftovers lists scratch objects left by this process's Probes.
func probeTestLeftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	dirs, _ := filepath.Glob(fmt.Sprintf("/sys/fs/cgroup/*/moat-probe-%d-*", os.Getpid()))
	out = append(out, dirs...)
	others, _ := filepath.Glob("/sys/fs/cgroup/*/moat-probe*")
	if len(others) > len(dirs) {
		t.Logf("moat-probe dirs of other processes: %v", others)
	}
	if bin := probeTestIptablesBinary(); bin != "" && os.Geteuid() == 0 {
		rules, err := exec.Command(bin, "-w", "5", "-S").CombinedOutput()
		if err != nil {
			t.Logf("iptables -S: %v: %s", err, rules)
		}
		for line := range strings.SplitSeq(string(rules), "\n") {
			if strings.Contains(line, fmt.Sprintf("MOAT-PROBE-%d-", os.Getpid())) {
				out = append(out, "iptables: "+line)
			} else if strings.Contains(line, "MOAT-PROBE") {
				t.Logf("MOAT-PROBE chain of another process: %s", line)
			}
		}
	}
	return out
}

func TestProbeLeavesNothingBehind(t *testing.T) {
	// Several Probes at once: scratch names must not collide, and each
	// must clean up after itself.
	var wg sync.WaitGroup
	results := make([]ProbeResult, 3)
	for i := range results {
		wg.Go(func() { results[i] = Probe(context.Background()) })
	}
	wg.Wait()
	for _, r := range results {
		probeTestLayers(t, r)
		if os.Geteuid() == 0 {
			for _, n := range []string{probeCgroup, probeIptables} {
				a, _ := results[0].Layer(n)
				b, _ := r.Layer(n)
				if a.Available != b.Available {
					t.Errorf("%s: concurrent probes disagree: %+v vs %+v", n, a, b)
				}
			}
		}
	}
	if left := probeTestLeftovers(t); len(left) > 0 {
		t.Errorf("Probe left behind: %v", left)
	}
}

func TestProbeCancelledContext(t *testing.T) {
	testenv.Timing(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	res := Probe(ctx)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Probe with a cancelled context took %v", d)
	}
	probeTestLayers(t, res)
	if left := probeTestLeftovers(t); len(left) > 0 {
		t.Errorf("Probe left behind: %v", left)
	}
	//lint:ignore SA1012 Probe documents that a nil context is accepted.
	probeTestLayers(t, Probe(nil))
}

const probeTestUnprivEnv = "MOAT_PROBE_TEST_UNPRIVILEGED"

// TestProbeUnprivileged runs Probe as uid 65534: as root, by re-running this
// test binary under that uid; as non-root, in process.
func TestProbeUnprivileged(t *testing.T) {
	if os.Getenv(probeTestUnprivEnv) == "1" || os.Geteuid() != 0 {
		probeTestUnprivilegedChecks(t)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	// The child checks a time bound; the parent holds the lock for it (the
	// child taking it too would wait for its parent).
	testenv.Timing(t)
	// go test's work directory is private to root: copy the binary where
	// uid 65534 can execute it.
	dir, err := os.MkdirTemp("", "moat-probe-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "kernel.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(dst, src)
	src.Close()
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run", "^TestProbeUnprivileged$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{probeTestUnprivEnv + "=1", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: false}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 65534:\n%s", out)
	if err != nil {
		t.Fatalf("the unprivileged run failed: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: TestProbeUnprivileged") {
		t.Fatalf("the unprivileged run did not pass")
	}
	if left := probeTestLeftovers(t); len(left) > 0 {
		t.Errorf("the unprivileged Probe left behind: %v", left)
	}
}

func probeTestUnprivilegedChecks(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Fatal("expected to run as non-root")
	}
	start := time.Now()
	res := Probe(context.Background())
	if d := time.Since(start); d >= time.Second {
		t.Errorf("Probe took %v", d)
	}
	t.Logf("uid %d, Probe took %v\n%s", os.Getuid(), time.Since(start), res.Table())
	layers := probeTestLayers(t, res)
	if res.Root || layers[probeRoot].Available {
		t.Errorf("root reported for uid %d", os.Getuid())
	}
	// Creating cgroups at a hierarchy root needs privilege; as non-root it
	// must be reported missing with the errno.
	if l := layers[probeCgroup]; l.Available {
		t.Errorf("cgroup available as uid %d: %+v", os.Getuid(), l)
	} else if !regexp.MustCompile(`E[A-Z]+ \(|not mounted|disabled|no cgroup`).MatchString(l.Missing) {
		t.Errorf("cgroup missing without an errno or reason: %q", l.Missing)
	}
	if l := layers[probeIptables]; l.Available {
		t.Errorf("iptables available as uid %d: %+v", os.Getuid(), l)
	} else if probeTestIptablesBinary() != "" && !strings.Contains(strings.ToLower(l.Missing), "permission denied") {
		t.Errorf("iptables missing without the permission error: %q", l.Missing)
	}
	// Landlock needs no privilege.
	probeTestCheckLandlock(t, layers)
	if left := probeTestLeftovers(t); len(left) > 0 {
		t.Errorf("Probe left behind: %v", left)
	}
}

func TestProbeTableAndJSON(t *testing.T) {
	res := ProbeResult{
		Kernel: "6.18.44 x86_64", UID: 1000,
		Layers: []LayerStatus{
			{Name: probeLandlock, Available: true, Detail: "ABI 7 (filesystem)"},
			{Name: probeIptables, Missing: "iptables not found: apt-get install iptables", Cost: probeCosts[probeIptables]},
		},
	}
	tab := res.Table()
	for _, want := range []string{
		"kernel 6.18.44 x86_64, uid 1000\n",
		"LAYER", "STATUS", "DETAIL / WHY + COST",
		"landlock  ok       ABI 7 (filesystem)",
		"iptables  missing  why: iptables not found: apt-get install iptables",
		"                   cost: no per-cgroup egress filter",
		"1 of 2 layers available",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if l, ok := res.Layer(probeIptables); !ok || l.Available {
		t.Errorf("Layer(iptables) = %+v, %v", l, ok)
	}
	if _, ok := res.Layer("nope"); ok {
		t.Error("Layer(nope) found")
	}

	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"layers":[`, `"name":"landlock","available":true,"detail":"ABI 7 (filesystem)"}`, `"missing":"iptables not found`, `"cost":`, `"kernel":"6.18.44 x86_64"`, `"root":false`, `"uid":1000`} {
		if !strings.Contains(s, want) {
			t.Errorf("JSON lacks %s: %s", want, s)
		}
	}
	var back ProbeResult
	if err := json.Unmarshal(b, &back); err != nil || len(back.Layers) != 2 || back.Layers[1].Cost == "" {
		t.Errorf("round trip: %v %+v", err, back)
	}
}

func TestProbeSafelyRecovers(t *testing.T) {
	out := probeSafely(context.Background(), []string{probeSeccomp, probeCgroup}, func(context.Context) []LayerStatus {
		panic("boom")
	})
	if len(out) != 2 || out[0].Available || !strings.Contains(out[0].Missing, "boom") || out[1].Name != probeCgroup || out[1].Cost == "" {
		t.Errorf("after a panic: %+v", out)
	}
	out = probeSafely(context.Background(), []string{probeRoot}, func(context.Context) []LayerStatus { return nil })
	if len(out) != 1 || out[0].Name != probeRoot || out[0].Missing != "not probed" {
		t.Errorf("nothing returned: %+v", out)
	}
}

// TestProbeChildWithoutTrue: in an image with no true(1) (moat's own), the
// namespace probes still tell a clone that works from one that does not,
// instead of reporting every namespace missing for want of a binary.
func TestProbeChildWithoutTrue(t *testing.T) {
	orig := probeTrue
	t.Cleanup(func() { probeTrue = orig })
	probeTrue = func() (string, error) { return "", errors.New("no true here") }
	ctx := context.Background()
	if err := probeChild(ctx, 0); err != nil {
		t.Errorf("a plain child without true(1): %v, want nil (it reached execve)", err)
	}
	// A clone the kernel refuses is still an error: CLONE_NEWPID without
	// privilege, or without a user namespace, is EPERM for a non-root
	// caller; as root, an invalid flag combination stands in for it.
	if err := probeChild(ctx, unix.CLONE_NEWUSER|unix.CLONE_FS); err == nil {
		t.Error("a clone the kernel refuses (CLONE_NEWUSER|CLONE_FS, EINVAL): nil, want the clone's error")
	}
}
