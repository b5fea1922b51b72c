package ops

import (
	"fmt"
	"log/slog"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/budget"
)

// Guests log through the host so their records carry the invocation's
// module, action, principal and correlation id, and land wherever the
// operator sends the host's log, rather than on an unattended stderr.
//
// One record is bounded before it is decoded (abi.MaxLogRecord, the
// request as it came, fields and all; the message alone abi.MaxLogMessage)
// and refused past it rather than cut: see abi.MaxLogRecord. The records and
// bytes of one invocation are charged to its budget (budget.Limits.LogBytes
// and LogRecords), so many small records cannot flood the log either.

func init() {
	typed := Typed(logWrite)
	RegisterFamily(Family{Name: "log", Ops: []Op{{Name: abi.OpLogWrite, Func: func(env *Env, req []byte) ([]byte, error) {
		if len(req) > abi.MaxLogRecord {
			return nil, abi.Errorf(abi.CodeTooLarge, "log.write: the record is %d bytes (message and fields as JSON); the limit is %d: split it", len(req), abi.MaxLogRecord)
		}
		return typed(env, req)
	}}}})
}

func logWrite(env *Env, req *abi.LogWriteRequest) (*abi.Empty, error) {
	var level slog.Level
	switch req.Level {
	case abi.LevelDebug:
		level = slog.LevelDebug
	case abi.LevelInfo, "":
		level = slog.LevelInfo
	case abi.LevelWarn:
		level = slog.LevelWarn
	case abi.LevelError:
		level = slog.LevelError
	default:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "log.write: level %q is not one of debug, info, warn, error", req.Level)
	}
	if len(req.Message) > abi.MaxLogMessage {
		return nil, abi.Errorf(abi.CodeTooLarge, "log.write: message is %d bytes; the limit is %d", len(req.Message), abi.MaxLogMessage)
	}
	size := len(req.Message)
	for k, v := range req.Fields {
		size += len(k) + approxSize(v)
	}
	if err := budget.From(env.Context).Log(size); err != nil {
		return nil, err
	}
	if !env.Logger.Enabled(env.Context, level) {
		return &abi.Empty{}, nil
	}
	// The record carries the invocation's tags (Env.Log's) as its first
	// attributes: the same record as Env.Log().LogAttrs writes, without
	// making the tagged logger (slog.Logger.With formats its attributes
	// ahead, which pays only from the second record of an invocation).
	var attrs []slog.Attr
	logger := env.tagged
	if logger == nil {
		logger = env.Logger
		attrs = env.tags(make([]slog.Attr, 0, len(req.Fields)+6))
	} else {
		attrs = make([]slog.Attr, 0, len(req.Fields)+1)
	}
	attrs = append(attrs, slog.String("source", "guest"))
	for k, v := range req.Fields {
		attrs = append(attrs, slog.Any("guest."+k, v))
	}
	logger.LogAttrs(env.Context, level, req.Message, attrs...)
	return &abi.Empty{}, nil
}

// approxSize is about the size a decoded JSON value takes in a log record.
// The request was at most abi.MaxLogRecord bytes, so this is bounded too.
func approxSize(v any) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case map[string]any:
		n := 2
		for k, e := range v {
			n += len(k) + approxSize(e) + 2
		}
		return n
	case []any:
		n := 2
		for _, e := range v {
			n += approxSize(e) + 1
		}
		return n
	case nil:
		return 4
	default:
		return len(fmt.Sprint(v))
	}
}
