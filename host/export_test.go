package host

import (
	"github.com/moat-sandbox/moat/host/audit"
	"github.com/moat-sandbox/moat/host/store"
)

// StoreOf and AuditOf let this package's tests read the store and the
// audit trail a host opened itself. Embedders have no such door: one that
// reads them opens them and hands them in Config.Store and Config.Audit.
func StoreOf(h *Host) *store.Store { return h.store }

// AuditOf: see StoreOf.
func AuditOf(h *Host) *audit.Log { return h.audit }
