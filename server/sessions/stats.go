package sessions

// Live is the number of sessions this Manager holds now (running on this
// replica; paused ones are images, not counted), for the operator's
// metrics.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}
