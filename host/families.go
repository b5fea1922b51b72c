package host

// The op families that register themselves from the package of their
// service rather than from host/ops (docs/RATIONALE.md, "Why does the
// ai family register itself from host/ai"): importing them here makes
// every host offer them, as it offers host/ops' own, whether or not its
// embedder configures them.
import (
	_ "github.com/moat-sandbox/moat/host/ai"
	_ "github.com/moat-sandbox/moat/host/media"
)
