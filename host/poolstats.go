package host

// IdleInstances is the number of instances in the module's pool, ready for
// the next invocation. Servers export it as a gauge: a pool that stays at
// zero under load means every call pays an instantiation.
func (m *Module) IdleInstances() int {
	return m.code.idle.Len()
}

// IdleMemoryBytes is the linear memory the module's idle instances hold,
// in bytes: what its pool costs while nothing runs (a resident Python
// instance holds its interpreter's heap, tens of MiB; a compiled plugin's
// a few). The pool's size bounds it (LoadOptions.MaxIdle).
func (m *Module) IdleMemoryBytes() uint64 {
	var n uint64
	m.code.idle.Each(func(inst *instance) {
		if inst.mem != nil {
			n += inst.mem.Size()
		}
	})
	return n
}
