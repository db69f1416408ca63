// Package tellonce is the memory controllers keep so that an unchanged state is told (an event,
// a log line) once, not on every sync: per object key, the last value told. Losing it (a
// restart) only means that the state is told once more, so it may live in memory.
package tellonce

import "sync"

// Memo is safe for concurrent use; its zero value is ready to use.
type Memo struct {
	mu   sync.Mutex
	seen map[string]string
}

// First reports whether value differs from the last one told for key (or none was), and
// remembers it.
func (m *Memo) First(key, value string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[string]string{}
	}
	if v, ok := m.seen[key]; ok && v == value {
		return false
	}
	m.seen[key] = value
	return true
}

// Forget drops what was told for key: the next value is told, whatever it is.
func (m *Memo) Forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, key)
}
