package ops

import (
	"log/slog"

	"github.com/moat-sandbox/moat/abi"
)

// Guests log through the host so their records carry the invocation's
// module, action, principal and correlation id, and land wherever the
// operator sends the host's log, rather than on an unattended stderr.

// maxLogMessage bounds one record so a guest cannot flood the log with one call.
const maxLogMessage = 16 << 10

func init() {
	Register(Op{Name: abi.OpLogWrite, Func: Typed(logWrite)})
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
	if len(req.Message) > maxLogMessage {
		return nil, abi.Errorf(abi.CodeTooLarge, "log.write: message is %d bytes; the limit is %d", len(req.Message), maxLogMessage)
	}
	if !env.Logger.Enabled(env.Context, level) {
		return &abi.Empty{}, nil
	}
	attrs := make([]slog.Attr, 0, len(req.Fields)+1)
	attrs = append(attrs, slog.String("source", "guest"))
	for k, v := range req.Fields {
		attrs = append(attrs, slog.Any("guest."+k, v))
	}
	env.Log().LogAttrs(env.Context, level, req.Message, attrs...)
	return &abi.Empty{}, nil
}
