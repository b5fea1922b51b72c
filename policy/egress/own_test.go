package egress_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/policy/egress"
)

// ownNetnsEnv marks the copy of the test binary that runs inside a
// network namespace of its own.
const ownNetnsEnv = "MOAT_EGRESS_OWN_NETNS"

// TestGuardOwnAddresses: a public address of one of the host's own
// interfaces is refused like loopback, through a wildcard grant and a
// name, and reached only when a grant writes the address; an address
// added after the first check is refused within a second. It runs in a
// network namespace of its own (unshare -n) with public addresses added to
// its interface, and a real server listening on them.
func TestGuardOwnAddresses(t *testing.T) {
	if os.Getenv(ownNetnsEnv) == "1" {
		ownAddressesInNetns(t)
		return
	}
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root to make a network namespace and add addresses to it"
	} else if _, err := exec.LookPath("unshare"); err != nil {
		why = "needs unshare (util-linux)"
	} else if _, err := exec.LookPath("ip"); err != nil {
		why = "needs ip (iproute2)"
	}
	testenv.Require(t, why)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-n", exe, "-test.run=^TestGuardOwnAddresses$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ownNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestGuardOwnAddresses") {
		t.Fatalf("in a network namespace of its own: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func ownAddressesInNetns(t *testing.T) {
	const own, later = "9.9.9.9", "9.9.9.10"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	ip("link", "set", "lo", "up")
	ip("addr", "add", own+"/32", "dev", "lo")

	ln, err := net.Listen("tcp4", "0.0.0.0:0") // every address of the namespace, as an admin port would
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the host's own service") })}
	go srv.Serve(ln)
	defer srv.Close()
	port := strings.TrimPrefix(ln.Addr().String(), "0.0.0.0:")

	send := func(g *egress.Guard, u string) (string, error) {
		c := egress.NewClient(egress.Config{Guard: g, DialTimeout: 2 * time.Second})
		defer c.CloseIdleConnections()
		resp, _, err := c.Send(t.Context(), egress.Request{URL: u}, egress.Hooks{})
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	refused := func(what, addr string, err error) {
		t.Helper()
		var e *egress.Error
		if !errors.As(err, &e) || e.Rule != "address" || e.Class != "this host's own" ||
			!strings.Contains(err.Error(), addr+":"+port+" is an address of one of this host's own interfaces") || !strings.Contains(err.Error(), "a grant of http://"+addr+":"+port+" would") {
			t.Errorf("%s: %v; want the address refused as the host's own", what, err)
		}
	}
	wildcard := egress.NewGuard([]string{"http://*:*", "http://*:" + port})
	_, err = send(wildcard, "http://"+own+":"+port+"/")
	refused("a wildcard grant", own, err)
	// 8.8.8.8 is public and not this namespace's: it passes the guard
	// (and finds no route here, which is the network's answer, not a
	// refusal).
	if err := wildcard.Check(netipAddrPort(t, "8.8.8.8:"+port)); err != nil {
		t.Errorf("a public address not the host's: %v", err)
	}
	// Written by its address, it is the operator's choice.
	if body, err := send(egress.NewGuard([]string{"http://" + own + ":" + port}), "http://"+own+":"+port+"/"); err != nil || body != "the host's own service" {
		t.Errorf("a grant naming the address: %q %v", body, err)
	}
	// An address the host gains later is refused once the listing is read
	// again (at most a second later).
	if err := wildcard.Check(netipAddrPort(t, later+":"+port)); err != nil {
		t.Fatalf("%s before the interface has it: %v", later, err)
	}
	ip("addr", "add", later+"/32", "dev", "lo")
	time.Sleep(1100 * time.Millisecond)
	_, err = send(wildcard, "http://"+later+":"+port+"/")
	refused("an address added later", later, err)
}

func netipAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}
