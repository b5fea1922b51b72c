//go:build !linux

package wasmlimit

import "errors"

// Mapped memories are Linux's (mapped_linux.go); elsewhere every memory
// is the Go heap's and MapPrivate refuses.

func (a *Allocator) UseMapping(uint64) {}
func (a *Allocator) Mapped() bool      { return false }
func (a *Allocator) KeepWhile(any)     {}
func (m *memory) reserve() bool        { return false }
func (a *Allocator) MapPrivate(int, uint64) error {
	return errors.New("wasmlimit: mapped memories are Linux's")
}

type reservation struct{}

func (*reservation) commit(uint64) []byte { return nil }
func (*reservation) free(bool)            {}
func (*reservation) release()             {}

func (m *memory) initialScratch(uint64) []byte { return nil }
func (m *memory) leaveScratch(uint64) []byte   { return nil }
