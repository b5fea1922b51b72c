package ops

import "time"

// Observation is what the host reports of one op a guest called, to an
// embedder's host.Config.ObserveOp (a server's metrics): enough to count
// ops and their latency per family, the bytes that crossed the boundary,
// and a model call's tokens, with no guest data.
type Observation struct {
	Org, Module string
	// Op is the op's name (http.fetch); Family its family's ("" for an op
	// registered alone).
	Op, Family string
	// Code is "ok" or the abi code the op failed with (denied, timeout, …).
	Code     string
	Duration time.Duration
	// RequestBytes and ReplyBytes are the sizes of the op's request (from
	// the guest) and reply (to it): for http.fetch, roughly what left the
	// sandbox and what came back.
	RequestBytes, ReplyBytes int
	// InputTokens and OutputTokens are a model call's charged tokens
	// (ai.*, knowledge's embeddings); zero for other ops.
	InputTokens, OutputTokens int64
}
