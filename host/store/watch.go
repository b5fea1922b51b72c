package store

import (
	"context"
	"fmt"
	"time"

	"github.com/moat-sandbox/moat/host/store/driver"
)

// ModuleChange says that module Name of Org changed: its current version
// is now Digest, or it was deleted (Digest ""). Seq orders the changes.
type ModuleChange struct {
	Seq       int64
	Org, Name string
	Digest    string
	At        time.Time // the upload (or deletion) time
}

// Deleted reports whether the change is a deletion.
func (c ModuleChange) Deleted() bool { return c.Digest == "" }

// ModulePollInterval is how often WatchModules reads the change log even
// without a wake-up from the backend: the bound on how late it sees a
// change made by a writer the backend cannot hear (on SQLite, another
// process).
const ModulePollInterval = 250 * time.Millisecond

// moduleChangeBatch bounds the changes read at once.
const moduleChangeBatch = 256

// WatchModules returns a channel of every module change (upload, replace,
// delete; not pruning of old versions) committed after the call, by this
// process or any other using the same database, in order, each once. The
// channel is closed when ctx ends.
//
// Every module write appends to a change log in the same transaction, in
// commit order. The watcher reads the log after the last change it
// delivered whenever the backend wakes it (PostgreSQL: LISTEN/NOTIFY,
// fired by the write; SQLite: a broadcast from writes in this process) and
// at least every ModulePollInterval, so a lost notification (a dropped
// connection, a writer in another process) delays a change but never
// loses it. A reader that falls more than 10000 changes behind misses the
// oldest (the log keeps the last 10000).
func (s *Store) WatchModules(ctx context.Context) (<-chan ModuleChange, error) {
	last, err := s.b.ModuleChangeHead(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: modules.watch: %w", err)
	}
	wake, err := s.b.ModuleWake(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: modules.watch: %w", err)
	}
	out := make(chan ModuleChange, 16)
	go func() {
		defer close(out)
		tick := time.NewTicker(ModulePollInterval)
		defer tick.Stop()
		for {
			changes, err := s.b.ModuleChanges(ctx, last, moduleChangeBatch)
			if err == nil {
				for _, c := range changes {
					select {
					case out <- fromModuleChange(c):
					case <-ctx.Done():
						return
					}
					last = c.Seq
				}
				if len(changes) == moduleChangeBatch {
					continue // more are waiting
				}
			}
			// An error (the database is away) is retried at the next
			// tick: the log keeps what happened meanwhile.
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-tick.C:
			}
		}
	}()
	return out, nil
}

func fromModuleChange(c driver.ModuleChange) ModuleChange {
	return ModuleChange{Seq: c.Seq, Org: c.Org, Name: c.Name, Digest: c.Digest, At: fromNanos(c.At)}
}
