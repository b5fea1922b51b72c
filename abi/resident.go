package abi

// A resident interpreter serves many calls from one instance: the plugin's
// script runs once when the instance starts, registers its handlers
// (moat.action("greet", fn) in JavaScript, @moat.action("greet") in
// Python), and then asks the host for calls through the op device
// ($MOAT_OPS) with the control op OpNext, one line per call, which also
// carries the result of the call before:
//
//	guest → host  {"op":"moat.next","req":{"ready":{"actions":["greet"]}}}
//	host → guest  {"resp":{"action":"greet","text":"World","correlation_id":"c1"}}
//	guest → host  {"op":"kv.get","req":{"key":"count"}}           (the call's ops, as ever)
//	host → guest  {"resp":{"found":false}}
//	guest → host  {"op":"moat.next","req":{"output_text":"Hello"}}  (greet's result; the next call, please)
//	host → guest  {"resp":{"stop":true}}                          (the instance is done: exit)
//
// An input that is valid UTF-8 comes as text (a JSON string), any other as
// input (base64); a guest may send its output either way too: text costs
// an interpreter nothing to decode, where base64 in JavaScript is a loop.
//
// The host's write of a moat.next line returns only when it has the next
// call (or the instance is to stop), so an idle instance costs no CPU.
// Ops are refused outside a call: top-level code runs for no caller.
// $MOAT_RESIDENT is "1" in a resident instance's environment; an SDK that
// finds it unset runs the one action of the run ($MOAT_ACTION) instead.
const (
	OpNext      = "moat.next"
	ResidentEnv = "MOAT_RESIDENT"
)

// NextRequest is what a resident guest sends with OpNext: Ready on its
// first, the previous call's Output or Error on every later one.
type NextRequest struct {
	Ready      *NextReady `json:"ready,omitempty"`
	Output     []byte     `json:"output,omitempty"`
	OutputText string     `json:"output_text,omitempty"` // the output as text, in place of Output
	Error      *Error     `json:"error,omitempty"`
}

// NextReady lists the actions the script registered.
type NextReady struct {
	Actions []string `json:"actions"`
}

// NextReply is the next call, or Stop.
type NextReply struct {
	Action        string `json:"action,omitempty"`
	Input         []byte `json:"input,omitempty"`
	Text          string `json:"text,omitempty"` // the input, when it is valid UTF-8, in place of Input
	CorrelationID string `json:"correlation_id,omitempty"`
	Stop          bool   `json:"stop,omitempty"`
}
