package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/coreos/go-iptables/iptables"
)

// A runner that dies (SIGKILL, a crash) between making a job's egress
// rules and removing them leaves them in the host's tables: the jump from
// OUTPUT and the chain, in IPv4 and IPv6, and on a hybrid host the v2
// cgroup NewEgress made. Harmless while no process is in that cgroup, but
// they accumulate, and a later job's sweep is the only one that can see
// them: SweepJobCgroups calls SweepEgress after killing a dead runner's
// processes and before removing its cgroups.

// EgressRule is one jump to a chain of moat's egress in the OUTPUT chain
// of the filter table.
type EgressRule struct {
	Family     string // "ipv4" or "ipv6"
	CgroupPath string // the v2 cgroup the rule matches, relative to the v2 root
	Chain      string // the chain it jumps to (MOAT-...)
}

// EgressRules lists the jumps to moat's egress chains in both families'
// OUTPUT chains; none where iptables is not installed.
func EgressRules() ([]EgressRule, error) {
	var out []EgressRule
	var errs []error
	for _, f := range egressFamilies() {
		rules, err := egressRulesOf(f)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, rules...)
	}
	return out, errors.Join(errs...)
}

type egressFamily struct {
	name string
	t    *iptables.IPTables
}

// egressFamilies are the iptables of each family this host has.
func egressFamilies() []egressFamily {
	var out []egressFamily
	for _, f := range []struct {
		name  string
		proto iptables.Protocol
	}{{"ipv4", iptables.ProtocolIPv4}, {"ipv6", iptables.ProtocolIPv6}} {
		if t, err := iptables.New(iptables.IPFamily(f.proto)); err == nil {
			out = append(out, egressFamily{f.name, t})
		}
	}
	return out
}

// egressRulesOf reads the OUTPUT rules of one family and keeps those of
// the shape insert writes: -m cgroup --path P -j MOAT-...
func egressRulesOf(f egressFamily) ([]EgressRule, error) {
	lines, err := f.t.List("filter", "OUTPUT")
	if err != nil {
		return nil, fmt.Errorf("egress: list %s OUTPUT: %w", f.name, err)
	}
	var out []EgressRule
	for _, l := range lines {
		fields := strings.Fields(l)
		var path, chain string
		for i := 0; i+1 < len(fields); i++ {
			switch fields[i] {
			case "--path":
				// iptables -S quotes it.
				path = strings.Trim(fields[i+1], `"`)
			case "-j":
				chain = fields[i+1]
			}
		}
		if path != "" && strings.HasPrefix(chain, "MOAT-") {
			out = append(out, EgressRule{Family: f.name, CgroupPath: path, Chain: chain})
		}
	}
	return out, nil
}

// SweepEgress removes the egress rules of runners that are gone: the jump
// and its chain, once the cgroup the rule matches holds no process (a
// process left there would reach the network unfiltered once the jump is
// gone, so its rules stay until its cgroup is killed), and then the
// cgroups NewEgress made for such runners. A live runner's rules, and
// rules of a name without a runner (an older moat's), are never touched.
// It returns what it could not remove.
func SweepEgress() error {
	root, err := v2Root()
	if err != nil {
		return nil // no v2 hierarchy: no egress rule could be made
	}
	var errs []error
	// A cgroup a rule still names must stay: iptables could not delete
	// the rule by its spec once the path is gone.
	kept := map[string]bool{}
	for _, f := range egressFamilies() {
		rules, err := egressRulesOf(f)
		if err != nil {
			errs = append(errs, err)
			return errors.Join(errs...)
		}
		for _, r := range rules {
			if !deadAndEmpty(filepath.Join(root, r.CgroupPath)) {
				kept[filepath.Join(root, r.CgroupPath)] = true
				continue
			}
			if err := f.t.Delete("filter", "OUTPUT", "-m", "cgroup", "--path", r.CgroupPath, "-j", r.Chain); err != nil {
				kept[filepath.Join(root, r.CgroupPath)] = true
				errs = append(errs, fmt.Errorf("egress: remove the %s rule of %s, whose runner is gone: %w", f.name, r.CgroupPath, err))
				continue
			}
			if ok, _ := f.t.ChainExists("filter", r.Chain); ok {
				if err := f.t.ClearAndDeleteChain("filter", r.Chain); err != nil {
					errs = append(errs, fmt.Errorf("egress: remove %s chain %s, whose runner is gone: %w", f.name, r.Chain, err))
				}
			}
		}
	}
	for _, d := range deadEgressCgroups() {
		if kept[d] || !deadAndEmpty(d) {
			continue
		}
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("egress: remove cgroup %s, whose runner is gone: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// deadAndEmpty reports whether the v2 cgroup dir exists, is named for a
// runner that is gone, and holds no process.
func deadAndEmpty(dir string) bool {
	gone, named := JobRunnerGone(filepath.Base(dir))
	if !named || !gone {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return err == nil && strings.TrimSpace(string(b)) == ""
}

// deadEgressCgroups lists the cgroups NewEgress made for runners that are
// gone.
func deadEgressCgroups() []string {
	root, err := v2Root()
	if err != nil {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(root, egressParent, egressKind+"-*"))
	var out []string
	for _, d := range dirs {
		if gone, named := JobRunnerGone(filepath.Base(d)); named && gone {
			out = append(out, d)
		}
	}
	return out
}
