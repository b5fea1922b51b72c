package kernel

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"github.com/coreos/go-iptables/iptables"
)

// Egress lets the processes of one cgroup reach a list of TCP targets and
// nothing else, enforced by the kernel: an iptables chain of its own,
// jumped to from OUTPUT for packets whose socket belongs to the cgroup
// (-m cgroup --path), ACCEPTs the targets and REJECTs everything else.
//
// Native children get zero egress from an empty network namespace; Egress
// is for the children an operator grants specific targets to. They share
// the host's network namespace, so this chain (and Landlock's TCP rules,
// and the seccomp ban on MPTCP) is what holds them.
//
// The match binds to the cgroup object when the rule is inserted (measured
// on this machine kind), so NewEgress creates the cgroup first and Close
// removes the rules before the cgroup.
type Egress struct {
	id      string
	chain   string
	cgDir   string // absolute path of the v2 cgroup
	cgRel   string // the path iptables matches, relative to the v2 root
	tables  []*iptables.IPTables
	targets []EgressTarget
}

// EgressTarget is one allowed destination.
type EgressTarget struct {
	IP   net.IP
	Port int
}

func (t EgressTarget) String() string { return net.JoinHostPort(t.IP.String(), strconv.Itoa(t.Port)) }

// ParseEgressTargets turns "host:port" strings into targets, resolving host
// names now, on the host: a sandbox never gets to do its own DNS.
func ParseEgressTargets(specs []string) ([]EgressTarget, error) {
	var out []EgressTarget
	for _, s := range specs {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("egress target %q: write it as host:port, like 127.0.0.1:8080 or api.example.com:443", s)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("egress target %q: port %q is not 1-65535", s, port)
		}
		ips := []net.IP{net.ParseIP(host)}
		if ips[0] == nil {
			if ips, err = net.LookupIP(host); err != nil {
				return nil, fmt.Errorf("egress target %q: %v", s, err)
			}
		}
		for _, ip := range ips {
			out = append(out, EgressTarget{IP: ip, Port: p})
		}
	}
	return out, nil
}

// v2Root is where the unified hierarchy is mounted: /sys/fs/cgroup on a
// pure v2 system, /sys/fs/cgroup/unified on a hybrid one.
func v2Root() (string, error) {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "/sys/fs/cgroup", nil
	case cgroups.Hybrid:
		return "/sys/fs/cgroup/unified", nil
	default:
		return "", errors.New("no cgroup v2 hierarchy is mounted; iptables cannot match the sandbox's sockets")
	}
}

// NewEgress creates the cgroup and the chain for job id. Processes placed
// in CgroupDir() may reach only targets.
func NewEgress(id string, targets []EgressTarget) (e *Egress, err error) {
	if id == "" || strings.ContainsAny(id, "/. ") || len(id) > 20 {
		return nil, fmt.Errorf("egress: job id %q must be 1-20 characters without '/', '.' or spaces", id)
	}
	root, err := v2Root()
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	e = &Egress{id: id, chain: "MOAT-" + strings.ToUpper(id), cgRel: "moat-egress/" + id, targets: targets}
	if len(e.chain) > 28 {
		return nil, fmt.Errorf("egress: chain name %s is too long", e.chain)
	}
	e.cgDir = filepath.Join(root, e.cgRel)
	if err := os.MkdirAll(e.cgDir, 0o755); err != nil {
		return nil, fmt.Errorf("egress: create cgroup %s: %w", e.cgDir, err)
	}
	self := e // the error returns below set e to nil; the cleanup needs it
	defer func() {
		if err != nil {
			self.Close()
		}
	}()
	ipt4, err := iptables.New()
	if err != nil {
		return nil, fmt.Errorf("egress: iptables: %w (install the iptables package)", err)
	}
	ipt6, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv6))
	if err != nil {
		return nil, fmt.Errorf("egress: ip6tables: %w", err)
	}
	e.tables = []*iptables.IPTables{ipt4, ipt6}
	for i, t := range e.tables {
		if err := t.NewChain("filter", e.chain); err != nil {
			return nil, fmt.Errorf("egress: create chain %s: %w", e.chain, err)
		}
		for _, tg := range targets {
			if (tg.IP.To4() != nil) != (i == 0) {
				continue
			}
			if err := t.Append("filter", e.chain, "-d", tg.IP.String(), "-p", "tcp", "--dport", strconv.Itoa(tg.Port), "-j", "ACCEPT"); err != nil {
				return nil, fmt.Errorf("egress: allow %s: %w", tg, err)
			}
		}
		if err := t.Append("filter", e.chain, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"); err != nil {
			return nil, fmt.Errorf("egress: reject rule: %w", err)
		}
		if err := t.Append("filter", e.chain, "-j", "REJECT"); err != nil {
			return nil, fmt.Errorf("egress: reject rule: %w", err)
		}
		if err := t.Insert("filter", "OUTPUT", 1, "-m", "cgroup", "--path", e.cgRel, "-j", e.chain); err != nil {
			return nil, fmt.Errorf("egress: jump from OUTPUT for cgroup %s: %w", e.cgRel, err)
		}
	}
	return e, nil
}

// CgroupDir is the v2 cgroup whose processes the chain holds. Put a child
// there before it runs (clone3 with UseCgroupFD, or write its pid to
// cgroup.procs from a gate).
func (e *Egress) CgroupDir() string { return e.cgDir }

// Chain is the iptables chain's name.
func (e *Egress) Chain() string { return e.chain }

// Close removes the jump, the chain and the cgroup, in that order. It kills
// nothing: the caller ends the job's processes first (an occupied cgroup
// cannot be removed, and Close says so).
func (e *Egress) Close() error {
	var errs []error
	for _, t := range e.tables {
		if ok, _ := t.Exists("filter", "OUTPUT", "-m", "cgroup", "--path", e.cgRel, "-j", e.chain); ok {
			if err := t.Delete("filter", "OUTPUT", "-m", "cgroup", "--path", e.cgRel, "-j", e.chain); err != nil {
				errs = append(errs, err)
			}
		}
		if ok, _ := t.ChainExists("filter", e.chain); ok {
			if err := t.ClearAndDeleteChain("filter", e.chain); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if e.cgDir != "" {
		if err := os.Remove(e.cgDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", e.cgDir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("egress %s: cleanup: %w", e.id, err)
	}
	return nil
}
