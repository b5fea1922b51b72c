package policy

import (
	"fmt"
	"slices"
	"sync"
)

// The op table lives in host/ops: each op family registers, from its own
// file, its ops' names and the capability each needs. Policy keeps no list
// of its own; ops.Register declares every op here as it registers it, and
// CheckOp and sensitive_ops read this index. So an op added in one file is
// grantable, deniable and nameable in a profile with no edit in policy,
// and a name that is not in the table is refused everywhere alike. The
// capability an op needs is a row of the capability table
// (RegisterCapability, capability.go): a family with a capability of its
// own registers it before it declares its ops.

var (
	opsMu sync.RWMutex
	opCap = map[string]*capability{} // op name → its capability's row (nil for none)
)

// DeclareOp records that op exists and needs capability ("" for an op any
// module may call, like log.write). host/ops.Register calls it for every
// op it registers; nothing else should. It returns an error for an
// unknown capability or an op declared twice with different capabilities.
func DeclareOp(op, capability string) error {
	if op == "" {
		return fmt.Errorf("policy: an op needs a name")
	}
	k := lookupCap(capability)
	if capability != "" && k == nil {
		return fmt.Errorf("policy: op %s needs capability %q, which policy does not know (known: %v)", op, capability, CapabilityNames())
	}
	opsMu.Lock()
	defer opsMu.Unlock()
	if prev, dup := opCap[op]; dup && prev != k {
		return fmt.Errorf("policy: op %s declared with capability %q and %q", op, prev.name(), capability)
	}
	opCap[op] = k
	return nil
}

// OpCapability returns the capability op needs and whether op is in the
// op table at all.
func OpCapability(op string) (capability string, ok bool) {
	k, ok := opRow(op)
	return k.name(), ok
}

// opRow is the row of the capability op needs (nil for none) and whether
// op is in the op table: CheckOp's one lookup.
func opRow(op string) (*capability, bool) {
	opsMu.RLock()
	k, ok := opCap[op]
	opsMu.RUnlock()
	return k, ok
}

// CapabilityTarget is what a call of an op needing capability names as
// its target: "collection" or "model" (or what another Named capability
// names), "url", "path", or "" when the capability is granted as a whole
// (a Flag) or is not in the table.
func CapabilityTarget(capability string) string {
	if k := lookupCap(capability); k != nil {
		return k.Target
	}
	return ""
}

// CapabilityNames lists the capabilities of the table, sorted.
func CapabilityNames() []string {
	var names []string
	for _, k := range table() {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	return names
}

// KnownOps lists the ops of the op table, sorted.
func KnownOps() []string {
	opsMu.RLock()
	defer opsMu.RUnlock()
	names := make([]string, 0, len(opCap))
	for n := range opCap {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
