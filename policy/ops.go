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
// and a name that is not in the table is refused everywhere alike.

// capabilityTargets says, for each capability an op can need, what kind of
// target a call names: "" for a capability granted as a whole (kv, media,
// tasks), "collection", "model" or "url" for one granted per target (db
// and knowledge collections, ai models, http URLs). A new capability is
// one row here plus its field in Capabilities.
var capabilityTargets = map[string]string{
	"kv":        "",
	"db":        "collection",
	"http":      "url",
	"media":     "",
	"ai":        "model",
	"knowledge": "collection",
	"tasks":     "",
}

var (
	opsMu sync.RWMutex
	opCap = map[string]string{} // op name → capability ("" for none)
)

// DeclareOp records that op exists and needs capability ("" for an op any
// module may call, like log.write). host/ops.Register calls it for every
// op it registers; nothing else should. It returns an error for an
// unknown capability or an op declared twice with different capabilities.
func DeclareOp(op, capability string) error {
	if op == "" {
		return fmt.Errorf("policy: an op needs a name")
	}
	if _, ok := capabilityTargets[capability]; !ok && capability != "" {
		return fmt.Errorf("policy: op %s needs capability %q, which policy does not know (known: %v)", op, capability, CapabilityNames())
	}
	opsMu.Lock()
	defer opsMu.Unlock()
	if prev, dup := opCap[op]; dup && prev != capability {
		return fmt.Errorf("policy: op %s declared with capability %q and %q", op, prev, capability)
	}
	opCap[op] = capability
	return nil
}

// OpCapability returns the capability op needs and whether op is in the
// op table at all.
func OpCapability(op string) (capability string, ok bool) {
	opsMu.RLock()
	capability, ok = opCap[op]
	opsMu.RUnlock()
	return capability, ok
}

// CapabilityTarget is what a call of an op needing capability names as
// its target: "collection", "model", "url", or "" when the capability is
// granted as a whole.
func CapabilityTarget(capability string) string { return capabilityTargets[capability] }

// CapabilityNames lists the capabilities an op can need, sorted.
func CapabilityNames() []string {
	names := make([]string, 0, len(capabilityTargets))
	for n := range capabilityTargets {
		names = append(names, n)
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
