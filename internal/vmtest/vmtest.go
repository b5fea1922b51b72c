// Package vmtest boots a Linux kernel under QEMU with KVM and runs Go test
// binaries inside it, to test moat on a kernel set up unlike the machine
// the tests run on: the CI machine mounts cgroup v1 controllers, while
// production hosts and Kubernetes nodes run the unified cgroup v2
// hierarchy, which no container on the CI machine can switch to.
//
// The guest is small and fast to boot (about a second): an initramfs
// holding a Go /init (package guestinit), the test binaries and the few
// kernel modules that 9p needs; the host's /usr and /etc are shared
// read-only over virtio-9p, so the guest runs the same Debian userland
// (sh, coreutils, python3, iptables) as the host. /init mounts the
// pseudo-filesystems and the cgroup2 hierarchy, runs each binary in a
// leaf cgroup of its own, as systemd would, and writes their output to a
// second serial port that the host reads apart from the kernel's console.
package vmtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// GuestConfig is what /init reads from /vmtest.json.
type GuestConfig struct {
	// BootModules are kernel modules to load before anything is mounted
	// from the host, as paths in the initramfs, in load order.
	BootModules []string `json:"boot_modules"`
	// Shares are virtio-9p tags to mount read-only at Mount.
	Shares []Share `json:"shares"`
	// ModulesDir is where the whole module tree of the kernel is mounted
	// (Share), for the kernel's requests to load a module (iptables):
	// /proc/sys/kernel/modprobe runs modprobe -d there.
	ModulesDir string     `json:"modules_dir,omitempty"`
	Runs       []GuestRun `json:"runs"`
}

// Share is one virtio-9p export of a host directory.
type Share struct {
	Tag   string `json:"tag"`
	Host  string `json:"host"`  // host directory
	Mount string `json:"mount"` // guest mount point
}

// GuestRun is one program /init runs, with its output on the results port.
type GuestRun struct {
	Name    string   `json:"name"`
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Timeout Duration `json:"timeout"`
}

// Duration is a time.Duration that reads and writes as "1.5s" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Markers /init writes on the results port, one per line.
const (
	MarkInit = "MOATVM INIT" // uptime=<s> release=<uname -r>
	MarkInfo = "MOATVM INFO" // key=value
	MarkRun  = "MOATVM RUN"  // <name>
	MarkExit = "MOATVM EXIT" // <name> <exit code> <seconds>
	MarkDone = "MOATVM DONE"
	MarkFail = "MOATVM FAIL" // <why>: /init could not set the guest up
)

// Kernel is a kernel image with its module tree (as `make vm-kernel`
// unpacks Debian's linux-image package: boot/vmlinuz-<release> and
// lib/modules/<release> with depmod's index).
type Kernel struct {
	Root    string // the unpacked tree: boot/, lib/modules/
	Image   string // vmlinuz
	Release string // e.g. 6.1.0-56-amd64
	Modules string // lib/modules/<release>
	Config  string // boot/config-<release>, for the guest's /boot
}

// FindKernel finds the kernel unpacked under dir (MOAT_VM_KERNEL when set).
func FindKernel(dir string) (Kernel, error) {
	if env := os.Getenv("MOAT_VM_KERNEL"); env != "" {
		dir = env
	}
	images, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	if len(images) == 0 {
		return Kernel{}, fmt.Errorf("no kernel image under %s/boot (make vm-kernel unpacks Debian's linux-image-amd64 there)", dir)
	}
	k := Kernel{Root: dir, Image: images[len(images)-1]}
	k.Release = strings.TrimPrefix(filepath.Base(k.Image), "vmlinuz-")
	k.Modules = filepath.Join(dir, "lib", "modules", k.Release)
	k.Config = filepath.Join(dir, "boot", "config-"+k.Release)
	if _, err := os.Stat(filepath.Join(k.Modules, "modules.dep")); err != nil {
		return Kernel{}, fmt.Errorf("kernel %s: no module index (%w): make vm-kernel runs depmod", k.Release, err)
	}
	return k, nil
}

// ModuleClosure returns the files (relative to k.Modules) of the named
// modules and of everything they depend on, dependencies first, from
// depmod's modules.dep.
func (k Kernel) ModuleClosure(names ...string) ([]string, error) {
	f, err := os.Open(filepath.Join(k.Modules, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{} // file → its dependencies
	byName := map[string]string{} // module name → file
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[file] = strings.Fields(rest)
		byName[strings.TrimSuffix(filepath.Base(file), ".ko")] = file
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{}
	var visit func(file string)
	visit = func(file string) {
		if seen[file] {
			return
		}
		seen[file] = true
		for _, d := range deps[file] {
			visit(d)
		}
		out = append(out, file)
	}
	for _, n := range names {
		file, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			file, ok = byName[n]
		}
		if !ok {
			return nil, fmt.Errorf("kernel %s has no module %s (built in, or not built)", k.Release, n)
		}
		visit(file)
	}
	return out, nil
}

// Machine is one VM to boot.
type Machine struct {
	Kernel  Kernel
	QEMU    string // qemu-system-x86_64
	Accel   string // "kvm", or "tcg" (emulation) where KVM cannot run the kernel
	MemMiB  int
	CPUs    int
	Cmdline []string // kernel parameters beyond the console and panic ones
	// Files are extra files of the initramfs: guest path → host path.
	Files   map[string]string
	Guest   GuestConfig
	Init    string // the static /init binary (package guestinit)
	Scratch string
}

// Output is what a boot produced.
type Output struct {
	Console string // the kernel's console (ttyS0)
	Results string // the results port (ttyS1), \r removed
	// Release and BootUptime come from /init's first line: the kernel's
	// release and its uptime when /init started (the kernel's boot time).
	Release    string
	BootUptime time.Duration
	Info       map[string]string
	Exits      map[string]int // run name → exit code
	RunTime    map[string]time.Duration
	Done       bool          // /init reached its end
	Wall       time.Duration // qemu start to exit
}

// Boot packs the initramfs, boots the machine and waits for it to power
// off (or ctx to end, which kills it).
func (m Machine) Boot(ctx context.Context) (*Output, error) {
	initrd := filepath.Join(m.Scratch, "initrd.cpio")
	if err := m.pack(initrd); err != nil {
		return nil, err
	}
	results := filepath.Join(m.Scratch, "results.txt")
	cpu := "host"
	if m.Accel == "tcg" {
		cpu = "max"
	}
	params := append([]string{"console=ttyS0", "panic=-1", "oops=panic", "loglevel=4", "rdinit=/init"}, m.Cmdline...)
	args := []string{
		"-machine", "pc,accel=" + m.Accel, "-cpu", cpu, "-m", strconv.Itoa(m.MemMiB), "-smp", strconv.Itoa(m.CPUs),
		"-nodefaults", "-no-reboot", "-display", "none", "-vga", "none", "-nic", "none",
		"-kernel", m.Kernel.Image, "-initrd", initrd, "-append", strings.Join(params, " "),
		"-serial", "stdio", "-serial", "file:" + results,
	}
	for i, s := range m.Guest.Shares {
		id := fmt.Sprintf("fs%d", i)
		args = append(args,
			"-fsdev", fmt.Sprintf("local,id=%s,path=%s,security_model=none,readonly=on", id, s.Host),
			"-device", fmt.Sprintf("virtio-9p-pci,fsdev=%s,mount_tag=%s", id, s.Tag))
	}
	cmd := exec.CommandContext(ctx, m.QEMU, args...)
	var console strings.Builder
	cmd.Stdout, cmd.Stderr = &console, &console
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	out := &Output{Console: console.String(), Wall: time.Since(start)}
	b, rerr := os.ReadFile(results)
	out.Results = strings.ReplaceAll(string(b), "\r", "")
	out.parse()
	if err != nil {
		return out, fmt.Errorf("qemu: %w", err)
	}
	if rerr != nil {
		return out, fmt.Errorf("results port: %w", rerr)
	}
	return out, nil
}

// pack writes the initramfs: /init, /vmtest.json, the boot modules, the
// extra files, the device nodes the kernel needs before devtmpfs, and
// merged-/usr symlinks into the shared /usr.
func (m Machine) pack(path string) error {
	a := newArchive()
	a.file("init", m.Init, 0o755)
	cfg := m.Guest
	for _, rel := range cfg.BootModules {
		a.file(filepath.Join("boot-modules", rel), filepath.Join(m.Kernel.Modules, rel), 0o644)
	}
	for i, rel := range cfg.BootModules {
		cfg.BootModules[i] = filepath.Join("/boot-modules", rel)
	}
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	a.bytes("vmtest.json", js, 0o644)
	for guest, host := range m.Files {
		a.file(guest, host, 0o755)
	}
	for _, d := range []string{"proc", "sys", "dev", "run", "usr", "etc", "root", "var"} {
		a.dir(d, 0o755)
	}
	a.dir("tmp", 0o1777)
	for _, s := range cfg.Shares {
		a.dir(s.Mount, 0o755)
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		a.symlink(l, "usr/"+l)
	}
	a.chardev("dev/console", 0o600, 5, 1)
	a.chardev("dev/null", 0o666, 1, 3)
	a.chardev("dev/ttyS1", 0o600, 4, 65) // the results port, opened before devtmpfs is mounted
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := a.writeTo(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (o *Output) parse() {
	o.Info, o.Exits, o.RunTime = map[string]string{}, map[string]int{}, map[string]time.Duration{}
	for _, line := range strings.Split(o.Results, "\n") {
		switch {
		case strings.HasPrefix(line, MarkInit+" "):
			for _, f := range strings.Fields(strings.TrimPrefix(line, MarkInit)) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "uptime":
					s, _ := strconv.ParseFloat(v, 64)
					o.BootUptime = time.Duration(s * float64(time.Second))
				case "release":
					o.Release = v
				}
			}
		case strings.HasPrefix(line, MarkInfo+" "):
			k, v, _ := strings.Cut(strings.TrimPrefix(line, MarkInfo+" "), "=")
			o.Info[k] = v
		case strings.HasPrefix(line, MarkExit+" "):
			f := strings.Fields(strings.TrimPrefix(line, MarkExit))
			if len(f) == 3 {
				code, _ := strconv.Atoi(f[1])
				secs, _ := strconv.ParseFloat(f[2], 64)
				o.Exits[f[0]] = code
				o.RunTime[f[0]] = time.Duration(secs * float64(time.Second))
			}
		case line == MarkDone:
			o.Done = true
		}
	}
}

// RunOutput returns what run name printed, between its markers.
func (o *Output) RunOutput(name string) string {
	_, rest, ok := strings.Cut(o.Results, MarkRun+" "+name+"\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(rest, MarkExit+" "+name+" ")
	return body
}

// GoTestResult is what `go test -v` said of one test or subtest.
type GoTestResult struct {
	Verdict string // PASS, FAIL or SKIP
	Output  string // the lines the test logged (its -v output)
}

var resultLine = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)

// ParseGoTest reads the verdict of every test and subtest from the -v
// output of a test binary. A test that started and has no verdict (the
// binary died in it) is "FAIL".
func ParseGoTest(out string) map[string]GoTestResult {
	res := map[string]GoTestResult{}
	var current string
	var buf strings.Builder
	for _, line := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(line, "=== RUN   "); ok {
			if _, seen := res[name]; !seen {
				res[name] = GoTestResult{Verdict: "FAIL"}
			}
			if !strings.Contains(name, "/") {
				current = name
				buf.Reset()
			}
			continue
		}
		if m := resultLine.FindStringSubmatch(line); m != nil {
			r := res[m[2]]
			r.Verdict = m[1]
			if m[2] == current {
				r.Output = buf.String()
			}
			res[m[2]] = r
			continue
		}
		buf.WriteString(line + "\n")
	}
	return res
}

// ErrNoVM says why this machine cannot boot a test VM.
var ErrNoVM = errors.New("vmtest: cannot boot a VM here")

// Available returns qemu-system-x86_64 and the accelerator to boot with:
// MOAT_VM_ACCEL when set; else "kvm" where /dev/kvm can run a stock
// kernel, and "tcg" (QEMU's emulation: slower, about 3x here, but any
// kernel boots) where it cannot: without /dev/kvm, or where /dev/kvm is
// PVM (kvm_pvm, the pagetable-based nested virtualization some cloud
// sandboxes offer, including this machine kind's), which runs only
// kernels built as PVM guests; Debian's kernel hangs there right after
// its real-mode setup.
func Available() (qemu, accel string, err error) {
	qemu, err = exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", "", fmt.Errorf("%w: qemu-system-x86_64 not found (Debian package qemu-system-x86; make test-tools installs it)", ErrNoVM)
	}
	if a := os.Getenv("MOAT_VM_ACCEL"); a != "" {
		return qemu, a, nil
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		return qemu, "tcg", nil
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return qemu, "tcg", nil
	}
	f.Close()
	return qemu, "kvm", nil
}
