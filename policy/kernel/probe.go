package kernel

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// LayerStatus is what Probe found out about one confinement layer.
type LayerStatus struct {
	// Name is one of ProbeLayerNames: "landlock", "landlock-net",
	// "landlock-scope", "seccomp", "cgroup", "userns", "netns", "procfs",
	// "iptables", "root".
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Detail says what was found, e.g. "ABI 7 (filesystem, ...)" or
	// "nf_tables backend; -m cgroup --path works". It is filled in for a
	// missing layer too when something was learned on the way.
	Detail string `json:"detail"`
	// Missing says why the layer is unavailable: the errno or the reason.
	Missing string `json:"missing,omitempty"`
	// Cost says what moat loses without the layer.
	Cost string `json:"cost,omitempty"`
}

// ProbeResult is the report of Probe: one LayerStatus per layer, in the
// order of ProbeLayerNames.
type ProbeResult struct {
	Layers []LayerStatus `json:"layers"`
	Kernel string        `json:"kernel"` // uname release and machine, e.g. "6.18.44 x86_64"
	Root   bool          `json:"root"`   // euid is 0
	UID    int           `json:"uid"`    // real uid
}

// Layer names, in report order.
const (
	probeLandlock      = "landlock"
	probeLandlockNet   = "landlock-net"
	probeLandlockScope = "landlock-scope"
	probeSeccomp       = "seccomp"
	probeCgroup        = "cgroup"
	probeUserns        = "userns"
	probeNetns         = "netns"
	probeProcfs        = "procfs"
	probeIptables      = "iptables"
	probeRoot          = "root"
)

// ProbeLayerNames returns the names of the layers Probe reports, in report
// order.
func ProbeLayerNames() []string {
	return []string{probeLandlock, probeLandlockNet, probeLandlockScope, probeSeccomp,
		probeCgroup, probeUserns, probeNetns, probeProcfs, probeIptables, probeRoot}
}

// probeBudget bounds a whole Probe; the layers are probed concurrently and
// each normally takes a few milliseconds.
const probeBudget = 800 * time.Millisecond

// probeSeq makes the names of scratch objects (cgroup dirs, iptables chains)
// unique when several Probes run at once in one process.
var probeSeq atomic.Uint32

// Probe tests which kernel confinement layers this machine and this process
// can use. It never panics, removes everything it creates (a scratch cgroup
// directory per hierarchy, a scratch iptables chain), installs no seccomp
// filter or Landlock domain in the caller, and returns within about 800 ms
// (a layer still being probed then is reported missing with "timed out").
// As non-root, the layers that need privilege are reported missing with the
// errno.
func Probe(ctx context.Context) ProbeResult {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, probeBudget)
	defer cancel()

	res := ProbeResult{Kernel: probeKernelRelease(), Root: os.Geteuid() == 0, UID: os.Getuid()}
	jobs := []struct {
		names []string
		fn    func(context.Context) []LayerStatus
	}{
		{[]string{probeLandlock, probeLandlockNet, probeLandlockScope}, probeLandlockLayers},
		{[]string{probeSeccomp}, probeOne(probeSeccompLayer)},
		{[]string{probeCgroup}, probeOne(probeCgroupLayer)},
		{[]string{probeUserns}, probeOne(probeUsernsLayer)},
		{[]string{probeNetns}, probeOne(probeNetnsLayer)},
		{[]string{probeProcfs}, probeOne(probeProcfsLayer)},
		{[]string{probeIptables}, probeOne(probeIptablesLayer)},
		{[]string{probeRoot}, probeOne(probeRootLayer)},
	}
	out := make([][]LayerStatus, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { out[i] = probeSafely(ctx, j.names, j.fn) })
	}
	wg.Wait()
	for _, ls := range out {
		res.Layers = append(res.Layers, ls...)
	}
	return res
}

func probeOne(fn func(context.Context) LayerStatus) func(context.Context) []LayerStatus {
	return func(ctx context.Context) []LayerStatus { return []LayerStatus{fn(ctx)} }
}

// probeSafely runs fn, turning a panic into "missing" entries, and makes
// sure exactly the expected layers come back, in order.
func probeSafely(ctx context.Context, names []string, fn func(context.Context) []LayerStatus) (out []LayerStatus) {
	defer func() {
		if r := recover(); r != nil {
			out = nil
			for _, n := range names {
				out = append(out, LayerStatus{Name: n, Missing: fmt.Sprintf("probe failed: %v (a moat bug; please report it)", r), Cost: probeCosts[n]})
			}
		}
	}()
	got := fn(ctx)
	out = make([]LayerStatus, 0, len(names))
	for _, n := range names {
		i := slices.IndexFunc(got, func(l LayerStatus) bool { return l.Name == n })
		if i < 0 {
			out = append(out, LayerStatus{Name: n, Missing: "not probed", Cost: probeCosts[n]})
			continue
		}
		l := got[i]
		if l.Available {
			l.Missing, l.Cost = "", ""
		} else if l.Cost == "" {
			l.Cost = probeCosts[n]
		}
		out = append(out, l)
	}
	return out
}

// probeCosts says what moat loses without each layer.
var probeCosts = map[string]string{
	probeLandlock: "native children can read and write any file their uid can and exec any binary; " +
		"the host process is not confined to its data directory",
	probeLandlockNet: "Landlock does not restrict TCP connect/bind of native children; " +
		"egress control rests on netns or iptables alone",
	probeLandlockScope: "native children can signal other processes of their uid " +
		"and connect to abstract unix sockets outside their sandbox",
	probeSeccomp: "native children keep every syscall (mount, ptrace, namespaces, kernel keyrings, MPTCP sockets " +
		"that bypass Landlock TCP rules); the host cannot forbid itself execve",
	probeCgroup: "no memory, CPU or process-count limits on native children: a memory hog or fork bomb " +
		"reaches the host's own limits (wasm guests keep wazero's memory limit and timeouts)",
	probeUserns: "without root, children cannot get their own network, mount or pid namespaces",
	probeNetns: "no zero-egress-by-construction for native children: egress control falls back to " +
		"iptables per cgroup (root) or Landlock TCP rules (TCP only)",
	probeProcfs: "native jobs (compilers, native languages and plugins) are refused, unless " + ProcEnv + "=bind gives them the pod's /proc: " +
		"then its pids are the pod's (Landlock still denies them every read of it)",
	probeIptables: "no per-cgroup egress filter: native children sharing the host network namespace " +
		"can reach any address unless they get a netns",
	probeRoot: "no cgroup limits, no iptables egress rules, children run as your uid instead of a dedicated one; " +
		"Landlock, seccomp and user+network namespaces still confine them",
}

// Layer returns the status of the named layer.
func (r ProbeResult) Layer(name string) (LayerStatus, bool) {
	for _, l := range r.Layers {
		if l.Name == name {
			return l, true
		}
	}
	return LayerStatus{}, false
}

// Table renders the report as the column table `moat doctor` prints:
// LAYER, STATUS (ok or missing), and DETAIL, or for a missing layer WHY and
// COST on lines of their own.
func (r ProbeResult) Table() string {
	var b bytes.Buffer
	who := fmt.Sprintf("uid %d", r.UID)
	if r.Root {
		who += " (euid 0, root)"
	}
	fmt.Fprintf(&b, "kernel %s, %s\n\n", r.Kernel, who)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LAYER\tSTATUS\tDETAIL / WHY + COST")
	ok := 0
	for _, l := range r.Layers {
		if l.Available {
			ok++
			fmt.Fprintf(tw, "%s\tok\t%s\n", l.Name, l.Detail)
			continue
		}
		first := "why: " + l.Missing
		fmt.Fprintf(tw, "%s\tmissing\t%s\n", l.Name, first)
		if l.Detail != "" {
			fmt.Fprintf(tw, "\t\tfound: %s\n", l.Detail)
		}
		if l.Cost != "" {
			fmt.Fprintf(tw, "\t\tcost: %s\n", l.Cost)
		}
	}
	tw.Flush()
	fmt.Fprintf(&b, "\n%d of %d layers available\n", ok, len(r.Layers))
	return b.String()
}

func probeKernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown (" + probeErr(err) + ")"
	}
	return unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
}

// probeErr renders an error with its errno name: "EACCES (permission denied)".
func probeErr(err error) string {
	if err == nil {
		return ""
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		name := unix.ErrnoName(en)
		if name == "" {
			name = "errno " + strconv.Itoa(int(en))
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			return fmt.Sprintf("%s %s: %s (%s)", pe.Op, pe.Path, name, en.Error())
		}
		return fmt.Sprintf("%s (%s)", name, en.Error())
	}
	return err.Error()
}

// probeTimedOut rewrites an error caused by the probe's deadline.
func probeTimedOut(ctx context.Context, err error) string {
	if s := probeCtxText(ctx); s != "" {
		return s + " (" + probeErr(err) + ")"
	}
	return probeErr(err)
}

// probeCtxText says why the probe's context ended, or "".
func probeCtxText(ctx context.Context) string {
	switch {
	case ctx.Err() == nil:
		return ""
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Sprintf("probe timed out (budget %v)", probeBudget)
	default:
		return "probe cancelled"
	}
}

// ---- Landlock ----

// probeLandlockFeatures names what each Landlock ABI version added.
var probeLandlockFeatures = []string{
	1:  "filesystem",
	2:  "refer",
	3:  "truncate",
	4:  "TCP bind/connect",
	5:  "device ioctl",
	6:  "IPC scoping (signals, abstract unix sockets)",
	7:  "audit logging",
	8:  "all-threads enforcement",
	9:  "unix socket resolution",
	10: "UDP",
	11: "no_new_privs flag",
}

// probeLandlockABI asks the kernel for its Landlock ABI version, and its
// errata bitmask when the kernel knows that query (ABI 7+), without
// creating a ruleset.
func probeLandlockABI() (abi int, errata int, err error) {
	r, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0, -1, e
	}
	errata = -1
	if r2, _, e2 := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA); e2 == 0 {
		errata = int(r2)
	}
	return int(r), errata, nil
}

func probeLandlockLayers(context.Context) []LayerStatus {
	fs := LayerStatus{Name: probeLandlock}
	net := LayerStatus{Name: probeLandlockNet}
	scope := LayerStatus{Name: probeLandlockScope}
	abi, errata, err := probeLandlockABI()
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOSYS):
			fs.Missing = "landlock_create_ruleset: ENOSYS: the kernel is built without Landlock (CONFIG_SECURITY_LANDLOCK, Linux 5.13+)"
		case errors.Is(err, unix.EOPNOTSUPP):
			fs.Missing = "landlock_create_ruleset: EOPNOTSUPP: Landlock is built in but not enabled at boot (add landlock to the lsm= kernel parameter)"
		default:
			fs.Missing = "landlock_create_ruleset: " + probeErr(err)
		}
		net.Missing = "Landlock unavailable: " + fs.Missing
		scope.Missing = net.Missing
		return []LayerStatus{fs, net, scope}
	}
	var feats []string
	for v := 1; v <= abi && v < len(probeLandlockFeatures); v++ {
		feats = append(feats, probeLandlockFeatures[v])
	}
	if abi >= len(probeLandlockFeatures) {
		feats = append(feats, "newer features moat does not know yet")
	}
	fs.Available = abi >= 1
	fs.Detail = fmt.Sprintf("ABI %d (%s)", abi, strings.Join(feats, ", "))
	if errata > 0 {
		fs.Detail += fmt.Sprintf("; errata 0x%x", errata)
	}
	if !fs.Available {
		fs.Missing = fmt.Sprintf("the kernel reports Landlock ABI %d", abi)
	}

	switch {
	case abi >= 10:
		net.Available = true
		net.Detail = fmt.Sprintf("ABI %d: TCP and UDP; MPTCP not covered: moat blocks MPTCP with seccomp", abi)
	case abi >= 4:
		net.Available = true
		net.Detail = fmt.Sprintf("ABI %d: TCP only; UDP and MPTCP not covered: moat blocks MPTCP with seccomp", abi)
	default:
		net.Missing = fmt.Sprintf("Landlock ABI %d < 4: TCP rules need Linux 6.7+", abi)
	}
	if abi >= 6 {
		scope.Available = true
		scope.Detail = fmt.Sprintf("ABI %d: signals and abstract unix sockets scoped to the sandbox", abi)
	} else {
		scope.Missing = fmt.Sprintf("Landlock ABI %d < 6: IPC scoping needs Linux 6.12+", abi)
	}
	return []LayerStatus{fs, net, scope}
}

// ---- seccomp ----

// probeSeccompActionAvail asks seccomp(SECCOMP_GET_ACTION_AVAIL) whether the
// kernel knows a filter return action. It installs nothing.
func probeSeccompActionAvail(action uint32) error {
	a := action
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&a)))
	if e != 0 {
		return e
	}
	return nil
}

// probeProcStatus reads the named fields of /proc/self/status.
func probeProcStatus(fields ...string) map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return out
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && slices.Contains(fields, k) {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func probeSeccompLayer(context.Context) LayerStatus {
	l := LayerStatus{Name: probeSeccomp}
	mode, _, e := unix.Syscall(unix.SYS_PRCTL, unix.PR_GET_SECCOMP, 0, 0)
	if e != 0 {
		if e == unix.EINVAL {
			l.Missing = "prctl(PR_GET_SECCOMP): EINVAL: the kernel is built without seccomp (CONFIG_SECCOMP)"
		} else {
			l.Missing = "prctl(PR_GET_SECCOMP): " + probeErr(e)
		}
		return l
	}
	actions := []struct {
		name string
		v    uint32
	}{
		{"errno", unix.SECCOMP_RET_ERRNO},
		{"kill_process", unix.SECCOMP_RET_KILL_PROCESS},
		{"trap", unix.SECCOMP_RET_TRAP},
		{"log", unix.SECCOMP_RET_LOG},
		{"user_notif", unix.SECCOMP_RET_USER_NOTIF},
	}
	var have, lack []string
	var errnoErr error
	for _, a := range actions {
		err := probeSeccompActionAvail(a.v)
		if err == nil {
			have = append(have, a.name)
			continue
		}
		lack = append(lack, a.name)
		if a.name == "errno" {
			errnoErr = err
		}
	}
	st := probeProcStatus("Seccomp", "Seccomp_filters", "NoNewPrivs")
	self := fmt.Sprintf("this process: seccomp mode %d", mode)
	if n := st["Seccomp_filters"]; n != "" && n != "0" {
		self += ", " + n + " inherited filter(s) (moat's stack on top)"
	}
	if st["NoNewPrivs"] == "1" {
		self += ", no_new_privs set"
	}
	switch {
	case errnoErr == nil:
		l.Available = true
		l.Detail = "filter mode; actions " + strings.Join(have, " ")
		if len(lack) > 0 {
			l.Detail += " (not: " + strings.Join(lack, " ") + ")"
		}
		l.Detail += "; " + self
	case errors.Is(errnoErr, unix.ENOSYS):
		l.Missing = "seccomp(2): ENOSYS: the kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER)"
	case errors.Is(errnoErr, unix.EINVAL) && mode != 1:
		// Kernels before 4.14 lack SECCOMP_GET_ACTION_AVAIL but have filters.
		l.Available = true
		l.Detail = "filter mode (the kernel cannot list actions: SECCOMP_GET_ACTION_AVAIL is EINVAL, Linux < 4.14); " + self
	default:
		l.Missing = "seccomp(SECCOMP_GET_ACTION_AVAIL, SECCOMP_RET_ERRNO): " + probeErr(errnoErr)
	}
	return l
}

// ---- cgroups ----

// probeCgroupMount is one mounted cgroup hierarchy.
type probeCgroupMount struct {
	dir         string
	v2          bool
	controllers []string // v1: the controllers bound to it (and name=...)
}

// probeCgroupMounts lists the cgroup hierarchies in /proc/self/mountinfo,
// the first mount of each.
func probeCgroupMounts() ([]probeCgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []probeCgroupMount
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || len(fields) < sep+4 {
			continue
		}
		fstype, opts := fields[sep+1], fields[sep+3]
		dir := strings.ReplaceAll(fields[4], `\040`, " ")
		switch fstype {
		case "cgroup2":
			if !seen["cgroup2"] {
				seen["cgroup2"] = true
				out = append(out, probeCgroupMount{dir: dir, v2: true})
			}
		case "cgroup":
			var ctrls []string
			for o := range strings.SplitSeq(opts, ",") {
				switch {
				case o == "rw" || o == "ro" || strings.HasPrefix(o, "release_agent=") || o == "clone_children" ||
					o == "noprefix" || o == "xattr" || o == "cpuset_v2_mode" || o == "favordynmods":
				default:
					ctrls = append(ctrls, o)
				}
			}
			key := strings.Join(ctrls, ",")
			if !seen[key] {
				seen[key] = true
				out = append(out, probeCgroupMount{dir: dir, controllers: ctrls})
			}
		}
	}
	return out, sc.Err()
}

// probeCgroupEnabled reads /proc/cgroups: controller → (v1 hierarchy id,
// enabled).
func probeCgroupEnabled() (names []string, hier map[string]int, enabled map[string]bool) {
	hier, enabled = map[string]int{}, map[string]bool{}
	data, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return nil, hier, enabled
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(f[0], "#") {
			continue
		}
		h, _ := strconv.Atoi(f[1])
		names = append(names, f[0])
		hier[f[0]] = h
		enabled[f[0]] = f[3] == "1"
	}
	return names, hier, enabled
}

// probeCgroupTrialDir creates and removes a scratch child of dir; nil means
// moat can create cgroups there.
func probeCgroupTrialDir(dir string) error {
	p := filepath.Join(dir, fmt.Sprintf("moat-probe-%d-%d", os.Getpid(), probeSeq.Add(1)))
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	// An empty cgroup can always be removed; retry once in case a
	// concurrent reader holds it busy for a moment.
	if err := unix.Rmdir(p); err != nil {
		time.Sleep(5 * time.Millisecond)
		if err2 := unix.Rmdir(p); err2 != nil {
			return fmt.Errorf("rmdir %s: %s (the scratch cgroup is left behind; remove it by hand)", p, probeErr(err2))
		}
	}
	return nil
}

func probeCgroupLayer(context.Context) LayerStatus {
	l := LayerStatus{Name: probeCgroup}
	mode := cgroups.Mode()
	mounts, merr := probeCgroupMounts()
	names, hier, enabled := probeCgroupEnabled()
	var modeText string
	switch mode {
	case cgroups.Legacy:
		modeText = "cgroup v1"
	case cgroups.Hybrid:
		modeText = "cgroup v1 (hybrid)"
	case cgroups.Unified:
		modeText = "cgroup v2"
	default:
		l.Missing = "no cgroup filesystem at /sys/fs/cgroup"
		if merr != nil {
			l.Missing += " (" + probeErr(merr) + ")"
		}
		return l
	}

	usable := map[string]bool{}
	why := map[string]string{} // controller → why it cannot be used
	var parts []string
	var v2note string
	for _, m := range mounts {
		if m.v2 {
			avail := probeReadWords(filepath.Join(m.dir, "cgroup.controllers"))
			err := probeCgroupTrialDir(m.dir)
			if mode == cgroups.Unified {
				sub := probeReadWords(filepath.Join(m.dir, "cgroup.subtree_control"))
				for _, c := range avail {
					if err == nil {
						usable[c] = true
					} else {
						why[c] = probeErr(err)
					}
				}
				v2note = fmt.Sprintf("at %s; enabled for children: %s", m.dir, probeWords(sub))
			} else {
				w := "writable"
				if err != nil {
					w = "not writable: " + probeErr(err)
				}
				v2note = fmt.Sprintf("v2 at %s: controllers %s, %s (a network identity for iptables -m cgroup)", m.dir, probeWords(avail), w)
			}
			continue
		}
		if mode == cgroups.Unified {
			continue
		}
		err := probeCgroupTrialDir(m.dir)
		for _, c := range m.controllers {
			if strings.HasPrefix(c, "name=") {
				continue
			}
			if err == nil && enabled[c] {
				usable[c] = true
			} else if err != nil {
				why[c] = probeErr(err)
			} else {
				why[c] = "disabled at boot (cgroup_disable=)"
			}
		}
	}

	var ok, notMounted []string
	for _, n := range names {
		if usable[n] {
			ok = append(ok, n)
		} else if mode != cgroups.Unified && enabled[n] && hier[n] == 0 && why[n] == "" {
			notMounted = append(notMounted, n)
		}
	}
	parts = append(parts, modeText)
	parts = append(parts, "usable controllers "+probeWords(ok))
	if len(notMounted) > 0 {
		parts = append(parts, "not on a v1 hierarchy: "+strings.Join(notMounted, " "))
	}
	if v2note != "" {
		parts = append(parts, v2note)
	}
	l.Detail = strings.Join(parts, "; ")

	var lacking []string
	for _, c := range []string{"memory", "pids"} {
		if usable[c] {
			continue
		}
		switch {
		case why[c] != "":
			lacking = append(lacking, c+": "+why[c])
		case !enabled[c] && slices.Contains(names, c):
			lacking = append(lacking, c+": disabled at boot")
		default:
			lacking = append(lacking, c+": not mounted")
		}
	}
	if len(lacking) == 0 {
		l.Available = true
	} else {
		l.Missing = strings.Join(lacking, "; ")
	}
	return l
}

func probeReadWords(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

func probeWords(w []string) string {
	if len(w) == 0 {
		return "(none)"
	}
	return strings.Join(w, " ")
}

// ---- namespaces ----

// probeTrue finds a binary that exits 0, for the namespace test children
// (a variable: a test takes it away, as moat's image has none).
var probeTrue = func() (string, error) {
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return exec.LookPath("true")
}

// probeChild starts true(1) with the clone flags (plus a user namespace
// mapping 0 to the caller when CLONE_NEWUSER is among them) and waits.
//
// An image without true(1) (moat's own: no shell, no coreutils) still gets
// an honest answer: the child then execs a path that does not exist. Go's
// fork reports a failed clone or id mapping as the errno of that step, and
// an exec failure in the child as the exec's errno, so ENOENT means the
// child was cloned into its namespaces and got as far as execve.
func probeChild(ctx context.Context, flags uintptr) error {
	bin, err := probeTrue()
	noTrue := err != nil
	if noTrue {
		bin = "/nonexistent/moat-probe-child"
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	if flags&unix.CLONE_NEWUSER != 0 {
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	}
	err = cmd.Run()
	if noTrue && errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}

func probeReadInt(path string) (int, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return n, err == nil
}

func probeUsernsLayer(ctx context.Context) LayerStatus {
	l := LayerStatus{Name: probeUserns}
	var notes []string
	if n, ok := probeReadInt("/proc/sys/user/max_user_namespaces"); ok {
		if n <= 0 {
			l.Missing = "user.max_user_namespaces is 0 (sysctl -w user.max_user_namespaces=15000 enables them)"
			return l
		}
		notes = append(notes, fmt.Sprintf("max_user_namespaces %d", n))
	} else if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		l.Missing = "the kernel has no user namespaces (CONFIG_USER_NS): " + probeErr(err)
		return l
	}
	if n, ok := probeReadInt("/proc/sys/kernel/unprivileged_userns_clone"); ok {
		notes = append(notes, fmt.Sprintf("unprivileged_userns_clone %d", n))
	}
	if n, ok := probeReadInt("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && n != 0 {
		notes = append(notes, "AppArmor restricts unprivileged user namespaces")
	}
	if err := probeChild(ctx, unix.CLONE_NEWUSER); err != nil {
		l.Missing = "a child in a new user namespace failed: " + probeTimedOut(ctx, err)
		l.Detail = strings.Join(notes, "; ")
		return l
	}
	l.Available = true
	l.Detail = fmt.Sprintf("a child in a new user namespace started (uid 0 inside = uid %d outside)", os.Getuid())
	if len(notes) > 0 {
		l.Detail += "; " + strings.Join(notes, "; ")
	}
	return l
}

func probeNetnsLayer(ctx context.Context) LayerStatus {
	l := LayerStatus{Name: probeNetns}
	flags := uintptr(unix.CLONE_NEWNET)
	how := "as root"
	if os.Geteuid() != 0 {
		flags |= unix.CLONE_NEWUSER
		how = "inside a new user namespace"
	}
	if err := probeChild(ctx, flags); err != nil {
		l.Missing = "a child in a new network namespace (" + how + ") failed: " + probeTimedOut(ctx, err)
		return l
	}
	l.Available = true
	l.Detail = "a child in a new network namespace started " + how + ": loopback only, zero egress by construction"
	return l
}

// ---- iptables ----

// probeIptablesBinary finds iptables, also in the sbin directories a
// non-root PATH often lacks.
func probeIptablesBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH, /usr/sbin or /sbin", name)
}

// probeRun runs the command and returns its stdout, or an error carrying its
// stderr.
func probeRun(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 100 * time.Millisecond
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		// iptables-nft warns about legacy tables on stderr; keep the error.
		var lines []string
		for line := range strings.SplitSeq(msg, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "# Warning") {
				lines = append(lines, line)
			}
		}
		msg = strings.Join(lines, "; ")
		if msg == "" {
			msg = err.Error()
		}
		if c := probeCtxText(ctx); c != "" {
			msg = c + ": " + msg
		}
		return stdout.String(), fmt.Errorf("%s %s: %s", filepath.Base(bin), strings.Join(args, " "), msg)
	}
	return stdout.String(), nil
}

func probeIptablesLayer(ctx context.Context) LayerStatus {
	l := LayerStatus{Name: probeIptables}
	bin, err := probeIptablesBinary("iptables")
	if err != nil {
		l.Missing = err.Error() + ": apt-get install iptables"
		return l
	}
	ver, err := probeRun(ctx, bin, "--version")
	if err != nil {
		l.Missing = err.Error()
		return l
	}
	backend := "legacy"
	if strings.Contains(ver, "nf_tables") {
		backend = "nf_tables"
	}
	version := strings.TrimSpace(ver)
	if f := strings.Fields(version); len(f) >= 2 {
		version = f[1]
	}
	l.Detail = fmt.Sprintf("%s backend (iptables %s)", backend, version)

	// ip6tables in parallel: a read-only listing.
	v6 := make(chan string, 1)
	go func() {
		b6, err := probeIptablesBinary("ip6tables")
		if err == nil {
			_, err = probeRun(ctx, b6, "-w", "1", "-t", "filter", "-S", "OUTPUT")
		}
		if err != nil {
			v6 <- "ip6tables unusable (IPv6 egress not filtered): " + err.Error()
		} else {
			v6 <- "ip6tables works"
		}
	}()

	// New() succeeds as non-root; a real call tells the truth.
	if _, err := probeRun(ctx, bin, "-w", "1", "-t", "filter", "-S", "OUTPUT"); err != nil {
		<-v6
		l.Missing = err.Error()
		return l
	}
	if msg := probeIptablesCgroupMatch(ctx, bin); msg != "" {
		l.Detail += "; rules work; -m cgroup --path fails"
		l.Missing = "the cgroup match: " + msg
		<-v6
		return l
	}
	l.Available = true
	l.Detail += "; -m cgroup --path works; " + <-v6
	return l
}

// probeIptablesCgroupMatch creates a scratch chain with a `-m cgroup --path /`
// rule and removes it. Nothing jumps to the chain, so it never sees a packet.
// It returns "" when the rule was accepted, else why not.
func probeIptablesCgroupMatch(ctx context.Context, bin string) string {
	chain := fmt.Sprintf("MOAT-PROBE-%d-%d", os.Getpid(), probeSeq.Add(1))
	if _, err := probeRun(ctx, bin, "-w", "1", "-t", "filter", "-N", chain); err != nil {
		return "creating a scratch chain: " + err.Error()
	}
	defer func() {
		// Clean up even when the probe's deadline has passed.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer cancel()
		probeRun(cctx, bin, "-w", "2", "-t", "filter", "-F", chain)
		probeRun(cctx, bin, "-w", "2", "-t", "filter", "-X", chain)
	}()
	if _, err := probeRun(ctx, bin, "-w", "1", "-t", "filter", "-A", chain, "-m", "cgroup", "--path", "/", "-j", "RETURN"); err != nil {
		return err.Error()
	}
	return ""
}

// ---- root ----

func probeRootLayer(context.Context) LayerStatus {
	l := LayerStatus{Name: probeRoot}
	if os.Geteuid() == 0 {
		l.Available = true
		l.Detail = "euid 0: moat can create cgroups, install iptables egress rules and run children as dedicated uids"
		return l
	}
	l.Missing = fmt.Sprintf("running as uid %d, euid %d", os.Getuid(), os.Geteuid())
	return l
}
