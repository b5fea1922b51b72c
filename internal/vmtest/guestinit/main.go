// Command guestinit is /init of the test VM that package vmtest boots: it
// mounts the pseudo-filesystems, the unified cgroup hierarchy and the
// host's /usr and /etc (virtio-9p, read-only), runs each program of
// /vmtest.json in a leaf cgroup of its own with its output on the second
// serial port, and powers the machine off.
//
// It is also the guest's modprobe (/proc/sys/kernel/modprobe): when the
// kernel asks for a module (iptables does), it runs as a process other
// than pid 1 and hands the request to the host's modprobe, pointed at the
// guest kernel's module tree.
//
// It is built static (CGO_ENABLED=0); the initramfs holds nothing else
// that runs.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moat-sandbox/moat/internal/vmtest"
	"golang.org/x/sys/unix"
)

func main() {
	if os.Getpid() != 1 {
		modprobe()
		return
	}
	out := openResults()
	if err := switchRoot(); err != nil {
		fmt.Fprintf(out, "%s switch root: %v\n", vmtest.MarkFail, err)
		poweroff()
	}
	if err := setup(out); err != nil {
		fmt.Fprintf(out, "%s %v\n", vmtest.MarkFail, err)
		fmt.Fprintf(os.Stderr, "guestinit: %v\n", err)
		poweroff()
	}
	cfg, err := readConfig()
	if err != nil {
		fmt.Fprintf(out, "%s %v\n", vmtest.MarkFail, err)
		poweroff()
	}
	for _, r := range cfg.Runs {
		runOne(out, r)
	}
	fmt.Fprintln(out, vmtest.MarkDone)
	poweroff()
}

// openResults opens the second serial port raw (no \n → \r\n), or the
// console when the machine has none.
func openResults() *os.File {
	f, err := os.OpenFile("/dev/ttyS1", os.O_WRONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		return os.Stdout
	}
	if t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
		t.Oflag &^= unix.OPOST
		_ = unix.IoctlSetTermios(int(f.Fd()), unix.TCSETS, t)
	}
	return f
}

func readConfig() (*vmtest.GuestConfig, error) {
	b, err := os.ReadFile("/vmtest.json")
	if err != nil {
		return nil, err
	}
	var cfg vmtest.GuestConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("/vmtest.json: %w", err)
	}
	return &cfg, nil
}

// switchRoot moves the initramfs onto a tmpfs mounted as /, as an
// initramfs's init does before it hands over to the real system: the
// kernel's rootfs cannot be pivoted away from (pivot_root fails with
// EINVAL there), and the native runner pivot_roots into each job's own
// root. Everything of the initramfs is bind-mounted into the new root.
func switchRoot() error {
	const nr = "/newroot"
	if err := os.Mkdir(nr, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", nr, "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	ents, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range ents {
		src, dst := "/"+e.Name(), filepath.Join(nr, e.Name())
		switch {
		case src == nr:
			continue
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			continue
		case e.IsDir():
			fi, err := os.Stat(src)
			if err != nil {
				return err
			}
			if err := os.Mkdir(dst, fi.Mode().Perm()); err != nil {
				return err
			}
			if err := os.Chmod(dst, fi.Mode()&(os.ModePerm|os.ModeSticky)); err != nil {
				return err
			}
		default:
			if err := os.WriteFile(dst, nil, 0o755); err != nil {
				return err
			}
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
	}
	if err := os.Chdir(nr); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s to /: %w", nr, err)
	}
	if err := unix.Chroot("."); err != nil {
		return err
	}
	return os.Chdir("/")
}

type mnt struct {
	src, dst, fstype string
	flags            uintptr
	data             string
}

func setup(out *os.File) error {
	for _, m := range []mnt{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
		{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
		{"tmpfs", "/root", "tmpfs", 0, "mode=0700"},
		{"tmpfs", "/var", "tmpfs", 0, "mode=0755"},
		{"securityfs", "/sys/kernel/security", "securityfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		// As systemd mounts it on a unified host.
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "nsdelegate,memory_recursiveprot"},
	} {
		if err := unix.Mount(m.src, m.dst, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err)
		}
	}
	var uptime string
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		uptime, _, _ = strings.Cut(string(b), " ")
	}
	var u unix.Utsname
	_ = unix.Uname(&u)
	fmt.Fprintf(out, "%s uptime=%s release=%s\n", vmtest.MarkInit, uptime, unix.ByteSliceToString(u.Release[:]))

	cfg, err := readConfig()
	if err != nil {
		return err
	}
	for _, ko := range cfg.BootModules {
		if err := loadModule(ko); err != nil {
			return err
		}
	}
	for _, s := range cfg.Shares {
		if err := unix.Mount(s.Tag, s.Mount, "9p", unix.MS_RDONLY|unix.MS_NODEV,
			"trans=virtio,version=9p2000.L,cache=loose,msize=524288"); err != nil {
			return fmt.Errorf("mount 9p %s on %s: %w", s.Tag, s.Mount, err)
		}
	}
	if cfg.ModulesDir != "" {
		if err := os.WriteFile("/proc/sys/kernel/modprobe", []byte("/init"), 0); err != nil {
			return err
		}
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte("moat-vm")); err != nil {
		return err
	}
	info := func(k, file string) {
		b, _ := os.ReadFile(file)
		fmt.Fprintf(out, "%s %s=%s\n", vmtest.MarkInfo, k, strings.TrimSpace(string(b)))
	}
	info("lsm", "/sys/kernel/security/lsm")
	info("cmdline", "/proc/cmdline")
	info("cgroup.controllers", "/sys/fs/cgroup/cgroup.controllers")
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err == nil {
		fmt.Fprintf(out, "%s cgroupfs.magic=%#x\n", vmtest.MarkInfo, st.Type)
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && err != unix.EEXIST {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	return nil
}

// loopbackUp sets lo up: tests listen on 127.0.0.1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

// runOne runs r in the leaf cgroup /vmtest.slice/<name> (so that the
// tests, like a service under systemd, run outside the root cgroup),
// its stdout and stderr on the results port, killed at its timeout.
func runOne(out *os.File, r vmtest.GuestRun) {
	fmt.Fprintf(out, "%s %s\n", vmtest.MarkRun, r.Name)
	start := time.Now()
	code := func() int {
		dir := filepath.Join("/sys/fs/cgroup/vmtest.slice", r.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintf(out, "guestinit: %v\n", err)
			return 125
		}
		cgfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintf(out, "guestinit: %v\n", err)
			return 125
		}
		defer unix.Close(cgfd)
		cmd := exec.Command(r.Path, r.Args...)
		cmd.Env = r.Env
		cmd.Dir = "/tmp"
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd, Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(out, "guestinit: %v\n", err)
			return 126
		}
		timer := time.AfterFunc(time.Duration(r.Timeout), func() {
			fmt.Fprintf(out, "guestinit: %s: timeout %s, killing its cgroup\n", r.Name, time.Duration(r.Timeout))
			_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		})
		// As pid 1, /init also inherits every orphan (a test's shell that
		// died with its children running): reap them all while waiting,
		// or their zombies stay charged to their cgroup's pids.current.
		code := -1
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, 0, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				fmt.Fprintf(out, "guestinit: wait: %v\n", err)
				break
			}
			if wpid == cmd.Process.Pid {
				code = ws.ExitStatus()
				if ws.Signaled() {
					code = 128 + int(ws.Signal())
				}
				break
			}
		}
		timer.Stop()
		if left, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(left) > 0 {
			fmt.Fprintf(out, "guestinit: %s left processes in its cgroup: %s\n", r.Name, strings.Fields(string(left)))
		}
		return code
	}()
	fmt.Fprintf(out, "%s %s %d %.3f\n", vmtest.MarkExit, r.Name, code, time.Since(start).Seconds())
}

// modprobe serves the kernel's request_module: "/init -q -- NAME".
func modprobe() {
	cfg, err := readConfig()
	if err != nil || cfg.ModulesDir == "" {
		os.Exit(1)
	}
	args := []string{"-d", cfg.ModulesDir}
	for _, a := range os.Args[1:] {
		if a != "--" && !strings.HasPrefix(a, "-") {
			args = append(args, "-q", "--", a)
			break
		}
	}
	cmd := exec.Command("/usr/sbin/modprobe", args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		os.Exit(1)
	}
}

func poweroff() {
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	for {
		time.Sleep(time.Hour)
	}
}
