package moat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/moat-sandbox/moat/abi"
)

// Config returns the value of key in the module's configuration (set by
// whoever loads the module, e.g. `moat run --config key=value`). found is
// false when the configuration has no such key; err is non-nil only when
// the op itself fails (for example, policy denies it).
func Config(key string) (value string, found bool, err error) {
	req, err := keyRequest(key)
	if err != nil {
		return "", false, abi.Errorf(abi.CodeInvalidArgument, "op %s: encode request: %v", abi.OpConfigGet, err)
	}
	var resp abi.ConfigGetResponse
	if err := roundTrip(abi.OpConfigGet, req, func(b []byte) error { return decodeConfigGet(b, &resp) }); err != nil {
		return "", false, err
	}
	return resp.Value, resp.Found, nil
}

// Logger writes records to the host's structured log, which tags them with
// the module, action, principal and correlation id. Use the package
// variable [Log]:
//
//	moat.Log.Info("greeted", "name", name, "count", n)
//
// The key/value pairs follow log/slog: alternating string keys and values
// of any JSON-encodable type (errors are logged by their message). A value
// without a key is logged under "!BADKEY", as slog does.
//
// Debug, Info, Warn and Error drop the record if the op fails: logging
// should never be the reason an action fails. Use Write to see the error.
type Logger struct{}

// Log is the host's structured log.
var Log Logger

// Debug logs msg at debug level.
func (Logger) Debug(msg string, kv ...any) { _ = Log.Write(abi.LevelDebug, msg, fields(kv)) }

// Info logs msg at info level.
func (Logger) Info(msg string, kv ...any) { _ = Log.Write(abi.LevelInfo, msg, fields(kv)) }

// Warn logs msg at warn level.
func (Logger) Warn(msg string, kv ...any) { _ = Log.Write(abi.LevelWarn, msg, fields(kv)) }

// Error logs msg at error level.
func (Logger) Error(msg string, kv ...any) { _ = Log.Write(abi.LevelError, msg, fields(kv)) }

// Write logs one record and reports whether the host accepted it. level is
// one of abi.LevelDebug, LevelInfo, LevelWarn and LevelError.
func (Logger) Write(level, msg string, fields map[string]any) error {
	if b, ok := logWriteRequest(level, msg, fields); ok {
		return roundTrip(abi.OpLogWrite, b, nil)
	}
	req := abi.LogWriteRequest{Level: level, Message: msg, Fields: fields}
	if _, err := json.Marshal(req.Fields); err != nil {
		// A value JSON cannot encode (a func, a channel, a cyclic value)
		// would lose the whole record: log every field as text instead.
		text := make(map[string]any, len(fields))
		for k, v := range fields {
			text[k] = fmt.Sprint(v)
		}
		req.Fields = text
	}
	return Call(abi.OpLogWrite, req, nil)
}

// badKey is the key slog uses for a value that has no key.
const badKey = "!BADKEY"

// fields turns slog-style alternating keys and values into a map.
func fields(kv []any) map[string]any {
	if len(kv) == 0 {
		return nil
	}
	m := make(map[string]any, (len(kv)+1)/2)
	for len(kv) > 0 {
		key, ok := kv[0].(string)
		if !ok || len(kv) == 1 {
			m[badKey] = fieldValue(kv[0])
			kv = kv[1:]
			continue
		}
		m[key] = fieldValue(kv[1])
		kv = kv[2:]
	}
	return m
}

// fieldValue makes a value log well as JSON: an error would otherwise
// encode as {} (its fields are usually unexported).
func fieldValue(v any) any {
	if err, ok := v.(error); ok && err != nil {
		if _, isMarshaler := v.(json.Marshaler); !isMarshaler {
			return err.Error()
		}
	}
	return v
}

// KVStore is the module's key-value store, scoped by the host to the
// calling principal's organization and this module. Use the package
// variable [KV]. Keys are at most abi.MaxKVKeyLen bytes and values at most
// abi.MaxKVValueLen; the host enforces both (abi.CodeTooLarge).
type KVStore struct{}

// KV is the module's key-value store.
var KV KVStore

// Get returns the value of key; found is false if the key does not exist.
func (KVStore) Get(key string) (value []byte, found bool, err error) {
	req, err := keyRequest(key)
	if err != nil {
		return nil, false, abi.Errorf(abi.CodeInvalidArgument, "op %s: encode request: %v", abi.OpKVGet, err)
	}
	var resp abi.KVGetResponse
	if err := roundTrip(abi.OpKVGet, req, func(b []byte) error { return decodeKVGet(b, &resp) }); err != nil {
		return nil, false, err
	}
	if resp.Found && resp.Value == nil {
		resp.Value = []byte{} // an empty value is still a value
	}
	return resp.Value, resp.Found, nil
}

// Put sets key to value, replacing any value it had.
func (KVStore) Put(key string, value []byte) error {
	req, err := kvPutRequest(key, value)
	if err != nil {
		return abi.Errorf(abi.CodeInvalidArgument, "op %s: encode request: %v", abi.OpKVPut, err)
	}
	return roundTrip(abi.OpKVPut, req, nil)
}

// Delete removes key and reports whether it existed.
func (KVStore) Delete(key string) (deleted bool, err error) {
	req, err := keyRequest(key)
	if err != nil {
		return false, abi.Errorf(abi.CodeInvalidArgument, "op %s: encode request: %v", abi.OpKVDelete, err)
	}
	var resp abi.KVDeleteResponse
	if err := roundTrip(abi.OpKVDelete, req, decodeInto(abi.OpKVDelete, &resp)); err != nil {
		return false, err
	}
	return resp.Deleted, nil
}

// List returns every key that starts with prefix, in lexical order. It
// follows the host's pagination (abi.MaxKVListLimit keys per op), so a
// large store costs several ops; use Call with abi.KVListRequest to page
// yourself.
func (KVStore) List(prefix string) ([]string, error) {
	var keys []string
	req := abi.KVListRequest{Prefix: prefix}
	for {
		var resp abi.KVListResponse
		if err := Call(abi.OpKVList, req, &resp); err != nil {
			return nil, err
		}
		keys = append(keys, resp.Keys...)
		if !resp.More {
			return keys, nil
		}
		if len(resp.Keys) == 0 {
			return nil, abi.Errorf(abi.CodeInternal, "kv.list: the host said more keys follow but returned none")
		}
		req.After = resp.Keys[len(resp.Keys)-1]
	}
}

// decodeKVGet decodes a kv.get reply. encoding/json is slow on wasm for
// large strings (its scanner steps a state machine per byte: about 40 ms
// for a 100 KiB value under wazero, where base64 alone takes well under a
// millisecond), so the shape the host's encoder produces for a found value,
// {"value":"BASE64","found":true}, is decoded directly. Any other reply
// goes through abi.Unmarshal.
func decodeKVGet(body []byte, resp *abi.KVGetResponse) error {
	const prefix, suffix = `{"value":"`, `","found":true}`
	if len(body) >= len(prefix)+len(suffix) && bytes.HasPrefix(body, []byte(prefix)) && bytes.HasSuffix(body, []byte(suffix)) {
		enc := body[len(prefix) : len(body)-len(suffix)]
		// Base64 never needs JSON escapes; a quote, a backslash or a raw
		// line break means this is not the simple shape (base64 decoding
		// would skip line breaks that JSON forbids).
		if !bytes.ContainsAny(enc, "\"\\\r\n") {
			v := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
			if n, err := base64.StdEncoding.Decode(v, enc); err == nil {
				resp.Value, resp.Found = v[:n], true
				return nil
			}
		}
	}
	if err := abi.Unmarshal(body, resp); err != nil {
		return abi.Errorf(abi.CodeInternal, "op %s: decode reply: %v", abi.OpKVGet, err)
	}
	return nil
}
