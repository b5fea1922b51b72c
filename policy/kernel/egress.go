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
// (-m cgroup --path), ACCEPTs the targets and REJECTs everything else, for
// IPv4 and IPv6 and every protocol.
//
// Native children get zero egress from an empty network namespace; Egress
// is for the children an operator grants specific targets to. They share
// the host's network namespace, so this chain (and Landlock's TCP rules,
// and the seccomp ban on MPTCP) is what holds them.
//
// The match names a cgroup of the unified (v2) hierarchy. On a pure v2
// host that is the job's own cgroup (NewEgressForCgroup); on a hybrid one,
// whose controllers are on v1, it is a v2 cgroup made for the purpose
// (NewEgress), which the job's wrapper joins beside its v1 cgroups. The
// match binds to the cgroup object when the rule is inserted (measured on
// this machine kind), so the cgroup exists first, and the rules go before
// the cgroup does: a rule naming a removed path can no longer be deleted
// by its spec.
type Egress struct {
	id         string
	chain      string
	cgDir      string // absolute path of the v2 cgroup
	cgRel      string // the path iptables matches, relative to the v2 root
	ownsCgroup bool   // NewEgress made cgDir, and Close removes it
	tables     []*iptables.IPTables
	targets    []EgressTarget
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

// egressParent is the v2 cgroup under which NewEgress makes its cgroups,
// and egressKind the kind in their names (egress-<pid>-<start>-<id>).
const (
	egressParent = "moat-egress"
	egressKind   = "egress"
)

// NewEgress creates a v2 cgroup of its own, moat-egress/egress-<runner>-<id>, and the
// chain for job id: for a host whose job cgroups are v1 ones, which
// iptables cannot match. Processes placed in CgroupDir() may reach only
// targets; Close removes the rules, then the cgroup.
func NewEgress(id string, targets []EgressTarget) (*Egress, error) {
	if err := checkEgressID(id); err != nil {
		return nil, err
	}
	root, err := v2Root()
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	// Named for this runner, as its job cgroups are, so that the sweep of
	// a later runner can tell a dead runner's rules from a live one's.
	dir := filepath.Join(root, egressParent, JobCgroupName(egressKind, id))
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("egress: create cgroup %s: %w", filepath.Dir(dir), err)
	}
	// A cgroup already there is another Egress's of the same id: its
	// chain name is taken too, which newEgress reports; the cgroup is
	// left to its owner.
	made := true
	if err := os.Mkdir(dir, 0o755); errors.Is(err, os.ErrExist) {
		made = false
	} else if err != nil {
		return nil, fmt.Errorf("egress: create cgroup %s: %w", dir, err)
	}
	e, err := newEgress(id, dir, targets, true)
	if err != nil {
		if !made {
			return nil, err
		}
		if rerr := os.Remove(dir); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("egress: remove cgroup %s: %w", dir, rerr))
		}
		return nil, err
	}
	return e, nil
}

// NewEgressForCgroup makes the chain for job id on cgDir, an existing
// cgroup of the v2 hierarchy that the caller owns (on a pure v2 host, the
// job's own cgroup, /sys/fs/cgroup/moat/job-<id>, matched as
// moat/job-<id>). Close removes the rules and never the cgroup.
//
// The caller orders the rest: the rules before any process of the job
// runs in cgDir, and Close only once every process of the cgroup is dead
// (a process left behind after Close has the host's network unfiltered),
// and before the cgroup is removed.
func NewEgressForCgroup(id, cgDir string, targets []EgressTarget) (*Egress, error) {
	if err := checkEgressID(id); err != nil {
		return nil, err
	}
	return newEgress(id, cgDir, targets, false)
}

func checkEgressID(id string) error {
	if id == "" || strings.ContainsAny(id, "/. ") || len(id) > 20 {
		return fmt.Errorf("egress: job id %q must be 1-20 characters without '/', '.' or spaces", id)
	}
	return nil
}

// v2Rel returns the path of cgroup dir relative to the v2 root, as the
// iptables cgroup match names it. The path must be exactly one cgroup
// below the root: absolute, clean (the kernel would resolve a ".." or a
// symlink other than the check did), and a directory holding
// cgroup.procs.
func v2Rel(dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("egress: cgroup %s is not an absolute path", dir)
	}
	if filepath.Clean(dir) != dir {
		return "", fmt.Errorf("egress: cgroup %s is not a clean path (want %s)", dir, filepath.Clean(dir))
	}
	root, err := v2Root()
	if err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("egress: cgroup %s is not a cgroup in the v2 hierarchy (a directory below %s)", dir, root)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("egress: cgroup %s: %w", dir, err)
	}
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		return "", fmt.Errorf("egress: cgroup %s is not a clean path (it resolves to %s)", dir, real)
	}
	return rel, nil
}

// newEgress inserts the chain and the jumps for cgroup dir; on error
// whatever it inserted is removed again (the cgroup is the caller's).
func newEgress(id, dir string, targets []EgressTarget, owns bool) (*Egress, error) {
	rel, err := v2Rel(dir)
	if err != nil {
		return nil, err
	}
	e := &Egress{id: id, chain: "MOAT-" + strings.ToUpper(id), cgDir: dir, cgRel: rel, targets: targets}
	if len(e.chain) > 28 {
		return nil, fmt.Errorf("egress: chain name %s is too long", e.chain)
	}
	if err := e.insert(); err != nil {
		if cerr := e.removeRules(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	e.ownsCgroup = owns
	return e, nil
}

// insert makes the chain in the IPv4 and IPv6 filter tables: ACCEPT each
// target of the family (TCP to its port), REJECT other TCP with a reset
// and everything else (UDP, ICMP, ...) with an ICMP error; then the jump
// from OUTPUT, first, for the cgroup's packets.
func (e *Egress) insert() error {
	ipt4, err := iptables.New()
	if err != nil {
		return fmt.Errorf("egress: iptables: %w (install the iptables package)", err)
	}
	ipt6, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv6))
	if err != nil {
		return fmt.Errorf("egress: ip6tables: %w", err)
	}
	for i, t := range []*iptables.IPTables{ipt4, ipt6} {
		if err := t.NewChain("filter", e.chain); err != nil {
			return fmt.Errorf("egress: create chain %s: %w", e.chain, err)
		}
		// Only a chain made here is this Egress's to remove: on a
		// name taken by another, the cleanup leaves that one alone.
		e.tables = append(e.tables, t)
		for _, tg := range e.targets {
			if (tg.IP.To4() != nil) != (i == 0) {
				continue
			}
			if err := t.Append("filter", e.chain, "-d", tg.IP.String(), "-p", "tcp", "--dport", strconv.Itoa(tg.Port), "-j", "ACCEPT"); err != nil {
				return fmt.Errorf("egress: allow %s: %w", tg, err)
			}
		}
		if err := t.Append("filter", e.chain, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"); err != nil {
			return fmt.Errorf("egress: reject rule: %w", err)
		}
		if err := t.Append("filter", e.chain, "-j", "REJECT"); err != nil {
			return fmt.Errorf("egress: reject rule: %w", err)
		}
		if err := t.Insert("filter", "OUTPUT", 1, "-m", "cgroup", "--path", e.cgRel, "-j", e.chain); err != nil {
			return fmt.Errorf("egress: jump from OUTPUT for cgroup %s: %w", e.cgRel, err)
		}
	}
	return nil
}

// CgroupDir is the v2 cgroup whose processes the chain holds. Put a child
// there before it runs (clone3 with UseCgroupFD, or write its pid to
// cgroup.procs from a gate).
func (e *Egress) CgroupDir() string { return e.cgDir }

// Chain is the iptables chain's name.
func (e *Egress) Chain() string { return e.chain }

// Close removes the jump and the chain, and then the cgroup when NewEgress
// made it (never one given to NewEgressForCgroup). It kills nothing: the
// caller ends the cgroup's processes first, since once the rules are gone
// a process left in the cgroup reaches the host's network unfiltered (and
// an occupied cgroup cannot be removed, which Close reports). A second
// Close does nothing.
func (e *Egress) Close() error {
	errs := []error{e.removeRules()}
	if e.ownsCgroup {
		if err := os.Remove(e.cgDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", e.cgDir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("egress %s: cleanup: %w", e.id, err)
	}
	return nil
}

// removeRules deletes the jump from OUTPUT, then the chain, in each table.
func (e *Egress) removeRules() error {
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
	return errors.Join(errs...)
}
