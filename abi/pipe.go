package abi

// The pipe transport carries the op table to native workers: processes
// that cannot import host functions (a python3 or bash plugin under the
// kernel layers). Host and worker exchange newline-delimited JSON, one
// PipeMessage per line, over two inherited pipes: the worker reads the host's
// messages on file descriptor PipeFromHostFD and writes its own on
// PipeToHostFD, so its stdout and stderr stay free for logging.
//
// A session:
//
//	worker → host  {"type":"ready","version":1,"actions":["greet"]}
//	host → worker  {"type":"invoke","id":1,"action":"greet","input":"V29ybGQ=","correlation_id":"c1"}
//	worker → host  {"type":"call","id":7,"op":"kv.get","req":{"key":"count"}}
//	host → worker  {"type":"reply","id":7,"resp":{"value":"Mw==","found":true}}
//	worker → host  {"type":"result","id":1,"output":"SGVsbG8="}
//	host → worker  {"type":"ping","id":2}
//	worker → host  {"type":"pong","id":2}
//
// A worker handles one invocation at a time; the host runs several workers
// for concurrency. Ids of calls are the worker's own; ids of invocations and
// pings are the host's.
const (
	PipeFromHostFD = 3
	PipeToHostFD   = 4
)

// PipeEnv is in every native worker's environment: it tells an SDK (moat.py) to speak this transport on fds 3 and 4.
const PipeEnv = "MOAT_TRANSPORT=pipe"

// Pipe message types.
const (
	PipeReady  = "ready"
	PipeInvoke = "invoke"
	PipeResult = "result"
	PipeCall   = "call"
	PipeReply  = "reply"
	PipePing   = "ping"
	PipePong   = "pong"
)

// MaxPipeLine bounds one message; a longer line ends the worker.
const MaxPipeLine = 16 << 20

// PipeMessage is one line of the pipe transport. Which fields are set
// depends on Type; []byte fields are base64 in JSON.
type PipeMessage struct {
	Type string `json:"type"`
	ID   uint64 `json:"id,omitempty"`

	// ready
	Version int      `json:"version,omitempty"`
	Actions []string `json:"actions,omitempty"`

	// invoke
	Action        string `json:"action,omitempty"`
	Input         []byte `json:"input,omitempty"`
	CorrelationID string `json:"correlation_id,omitempty"`

	// result
	Output []byte `json:"output,omitempty"`

	// call
	Op  string  `json:"op,omitempty"`
	Req RawJSON `json:"req,omitempty"`

	// reply
	Resp RawJSON `json:"resp,omitempty"`

	// result and reply
	Error *Error `json:"error,omitempty"`
}

// RawJSON is an encoded JSON value carried as is.
type RawJSON []byte

// MarshalJSON returns the raw bytes, or null when empty.
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

// UnmarshalJSON keeps a copy of the raw bytes.
func (r *RawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}
