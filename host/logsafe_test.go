package host_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host"
)

// TestSafeLogAttrDurations: a duration carries its unit in both handlers,
// in JSON too (slog's own JSON handler writes bare nanoseconds).
func TestSafeLogAttrDurations(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		h    func(*bytes.Buffer) slog.Handler
		want string
	}{
		{"json", func(b *bytes.Buffer) slog.Handler {
			return slog.NewJSONHandler(b, &slog.HandlerOptions{ReplaceAttr: host.SafeLogAttr})
		}, `"took":"1.5ms"`},
		{"text", func(b *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(b, &slog.HandlerOptions{ReplaceAttr: host.SafeLogAttr})
		}, `took=1.5ms`},
	} {
		var b bytes.Buffer
		slog.New(tt.h(&b)).Info("loaded", "took", 1500*time.Microsecond, slog.Group("g", "wait", 2*time.Second))
		if !strings.Contains(b.String(), tt.want) || !strings.Contains(b.String(), "2s") {
			t.Errorf("%s: %s; want %s and the group's 2s", tt.name, b.String(), tt.want)
		}
	}
}
