package policy

import "slices"

// KernelGrants is what a host's own kernel layers (package kernel's
// Landlock rules) must let through for the modules it runs: the TCP ports
// their HTTP targets reach and the directories their file grants name.
// The kernel layer is a backstop under the checks in Go (CheckOp, the
// connection's address check, the file grants' walk), never the decision:
// Landlock's connect rule is by port, so it cannot tell one host from
// another.
//
// It is derived from the effective grants, the same Evaluate that decides
// every op, so that what policy says yes to is never closed by the kernel
// (a plugin of any kind granted http://127.0.0.1:8080 can connect to port
// 8080) and what it refuses is not opened for it.
type KernelGrants struct {
	// ConnectTCP are the ports the effective HTTP targets reach, sorted.
	ConnectTCP []uint16
	// ConnectAnyTCP is true when an effective target reaches every port
	// ("*", or a port of "*"): the kernel cannot narrow it by port.
	ConnectAnyTCP bool
	// Read and Write are the granted directories the host opens for the
	// module: read-only, and read-write.
	Read, Write []string
}

// KernelGrants derives the kernel layers a host running m under p needs,
// from m's effective grants. The module's signature is verified later, by
// the host that loads it, so the grants are those of every mode m could
// load in: sandboxed, and trusted by each of p's trusted keys. A broader
// kernel layer than the mode that applies costs nothing the Go checks do
// not hold; a narrower one would refuse what policy granted.
func (p *Profile) KernelGrants(m *Manifest) KernelGrants {
	if m == nil {
		return KernelGrants{}
	}
	signers := []string{""}
	for _, k := range p.TrustedKeys {
		signers = append(signers, k.Name)
	}
	var targets []string
	var files []FileGrant
	for _, s := range signers {
		e := p.Evaluate(m, s)
		targets = append(targets, e.Effective.HTTP.Targets...)
		files = mergeFiles(files, e.Effective.Filesystem)
	}
	return kernelGrants(targets, files)
}

// HostKernelGrants derives the kernel layers of a host that loads modules
// after it confines itself (moat serve): every grant of every layer of the
// profiles, the most any module could be granted.
func HostKernelGrants(profiles ...*Profile) KernelGrants {
	var targets []string
	var files []FileGrant
	for _, p := range profiles {
		targets = append(targets, p.HTTPTargets()...)
		files = mergeFiles(files, p.FileGrants())
	}
	return kernelGrants(targets, files)
}

func kernelGrants(targets []string, files []FileGrant) KernelGrants {
	var k KernelGrants
	k.ConnectTCP, k.ConnectAnyTCP = TargetPorts(targets)
	for _, g := range files {
		switch {
		case g.RW && !slices.Contains(k.Write, g.Path):
			k.Write = append(k.Write, g.Path)
		case !g.RW && !slices.Contains(k.Read, g.Path):
			k.Read = append(k.Read, g.Path)
		}
	}
	return k
}

// Merge adds o's ports and directories to k's, as a host that also dials
// for itself (a database, a model provider) or opens directories of its
// own needs.
func (k KernelGrants) Merge(o KernelGrants) KernelGrants {
	out := KernelGrants{ConnectTCP: slices.Clone(k.ConnectTCP), ConnectAnyTCP: k.ConnectAnyTCP || o.ConnectAnyTCP,
		Read: slices.Clone(k.Read), Write: slices.Clone(k.Write)}
	for _, p := range o.ConnectTCP {
		if !slices.Contains(out.ConnectTCP, p) {
			out.ConnectTCP = append(out.ConnectTCP, p)
		}
	}
	slices.Sort(out.ConnectTCP)
	for _, d := range o.Read {
		if !slices.Contains(out.Read, d) {
			out.Read = append(out.Read, d)
		}
	}
	for _, d := range o.Write {
		if !slices.Contains(out.Write, d) {
			out.Write = append(out.Write, d)
		}
	}
	return out
}
