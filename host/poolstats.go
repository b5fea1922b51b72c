package host

// IdleInstances is the number of instances in the module's pool, ready for
// the next invocation. Servers export it as a gauge: a pool that stays at
// zero under load means every call pays an instantiation.
func (m *Module) IdleInstances() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.idle)
}
