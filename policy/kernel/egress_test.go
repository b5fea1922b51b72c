package kernel_test

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/kernel"
	"golang.org/x/sys/unix"
)

// listen opens a loopback TCP listener that accepts and closes connections.
func listen(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestEgressAllowsOnlyTargets: a child in the egress cgroup reaches the
// allowed port and is refused on another; outside the cgroup both work; no
// rule, chain or cgroup is left behind.
func TestEgressAllowsOnlyTargets(t *testing.T) {
	testenv.Root(t, "egress rules need root (iptables and cgroups); CI runs as root")
	python, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Fatal("python3 is required (make tools installs it)")
	}
	allowed, other := listen(t), listen(t)
	e, err := kernel.NewEgress("t"+strconv.Itoa(os.Getpid()), []kernel.EgressTarget{{IP: net.IPv4(127, 0, 0, 1), Port: allowed}})
	if err != nil {
		t.Fatal(err)
	}
	chain, dir := e.Chain(), e.CgroupDir()
	connect := func(port int, inCgroup bool) string {
		script := `import socket,sys
s=socket.socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1",int(sys.argv[1]))); print("connected")
except OSError as e:
    print("refused" if isinstance(e, ConnectionRefusedError) else "error %s" % e)`
		cmd := exec.Command(python, "-c", script, strconv.Itoa(port))
		if inCgroup {
			fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tt := range []struct {
		port     int
		inCgroup bool
		want     string
	}{
		{allowed, true, "connected"},
		{other, true, "refused"},
		{other, false, "connected"},
	} {
		if got := connect(tt.port, tt.inCgroup); got != tt.want {
			t.Errorf("port %d, in cgroup %v: %s, want %s", tt.port, tt.inCgroup, got, tt.want)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	rules, _ := exec.Command("iptables", "-S").CombinedOutput()
	if strings.Contains(string(rules), chain) {
		t.Fatalf("chain %s left behind:\n%s", chain, rules)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("cgroup %s left behind", dir)
	}
}

func TestParseEgressTargets(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		{"[::1]:443", "[::1]:443"},
		{"localhost", "write it as host:port"},
		{"127.0.0.1:0", "is not 1-65535"},
		{"127.0.0.1:http", "is not 1-65535"},
	} {
		got, err := kernel.ParseEgressTargets([]string{tt.in})
		s := ""
		if err != nil {
			s = err.Error()
		} else {
			s = got[0].String()
		}
		if !strings.Contains(s, tt.want) {
			t.Errorf("%s: %s, want %s", tt.in, s, tt.want)
		}
	}
}

// TestEgressSetupError: a chain that cannot be made (here: its name is
// taken) is an error, not a crash, and the half-made cgroup is removed.
func TestEgressSetupError(t *testing.T) {
	testenv.Root(t, "egress rules need root (iptables and cgroups); CI runs as root")
	id := "d" + strconv.Itoa(os.Getpid())
	first, err := kernel.NewEgress(id, []kernel.EgressTarget{{IP: net.IPv4(127, 0, 0, 1), Port: 9}})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	dir := first.CgroupDir()
	if _, err := kernel.NewEgress(id, nil); err == nil || !strings.Contains(err.Error(), "chain") {
		t.Fatalf("a second egress under the same id: %v, want a chain error", err)
	}
	first.Close()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("egress cgroup %s left behind: %v", dir, err)
	}
}
