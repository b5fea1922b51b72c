package abi

// Op names. An op family is the part before the dot.
const (
	OpLogWrite  = "log.write"
	OpConfigGet = "config.get"
	OpKVGet     = "kv.get"
	OpKVPut     = "kv.put"
	OpKVDelete  = "kv.delete"
	OpKVList    = "kv.list"
)

// MaxRequestBytes bounds the wire bytes of one op request, on every
// transport: the host refuses a longer request with CodeTooLarge before it
// decodes it. The largest legitimate request, a kv.put of a MaxKVValueLen
// value, is about 1.4 MB in base64.
const MaxRequestBytes = 4 << 20

// Empty is the request or response of an op that carries nothing.
type Empty struct{}

// Log levels accepted by log.write.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// Log record limits: the message, and the whole request (message, level
// and fields as JSON). A larger record is refused with CodeTooLarge, not
// truncated: a cut record could be read as the whole story, and a guest
// that is told can split it.
const (
	MaxLogMessage = 16 << 10
	MaxLogRecord  = 32 << 10
)

// LogWriteRequest writes one record to the host's structured log. The host
// adds the module, action, principal and correlation id.
type LogWriteRequest struct {
	Level   string         `json:"level,omitempty"` // debug, info (default), warn or error
	Message string         `json:"message"`
	Fields  map[string]any `json:"fields,omitempty"`
}

// ConfigGetRequest reads one value of the module's configuration.
type ConfigGetRequest struct {
	Key string `json:"key"`
}

// ConfigGetResponse answers a ConfigGetRequest; Found is false for a key the
// configuration does not have.
type ConfigGetResponse struct {
	Value string `json:"value"`
	Found bool   `json:"found"`
}

// Key-value limits, enforced by the host.
const (
	MaxKVKeyLen    = 512
	MaxKVValueLen  = 1 << 20
	MaxKVListLimit = 1000
)

// KVGetRequest reads one key of the caller's organization and module.
type KVGetRequest struct {
	Key string `json:"key"`
}

// KVGetResponse answers a KVGetRequest. Value is base64 in JSON.
type KVGetResponse struct {
	Value []byte `json:"value,omitempty"`
	Found bool   `json:"found"`
}

// KVPutRequest writes one key, replacing any value it had.
type KVPutRequest struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

// KVDeleteRequest removes one key.
type KVDeleteRequest struct {
	Key string `json:"key"`
}

// KVDeleteResponse says whether the key existed.
type KVDeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// KVListRequest lists keys in lexical order: those starting with Prefix and
// sorting after After, at most Limit of them (default and maximum
// MaxKVListLimit).
type KVListRequest struct {
	Prefix string `json:"prefix,omitempty"`
	After  string `json:"after,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// KVListResponse answers a KVListRequest. More is true when further keys
// follow the last one returned; pass it as After to continue.
type KVListResponse struct {
	Keys []string `json:"keys"`
	More bool     `json:"more"`
}

// OpCaller is moat.caller: who the invocation runs for. The request is
// empty (any field a guest sends is ignored: the principal is the
// invocation's, never the guest's word), and it needs no grant.
const OpCaller = "moat.caller"

// CallerResponse answers moat.caller with the invocation's principal: the
// user and organization it runs for, the user's roles (never null), and
// the correlation id its log records and audit events carry. A task or
// schedule runs for the principal that enqueued it (a schedule's is the
// organization's service principal).
type CallerResponse struct {
	User          string   `json:"user"`
	Org           string   `json:"org"`
	Roles         []string `json:"roles"`
	CorrelationID string   `json:"correlation_id"`
}
