package server_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/hostile"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
)

// TestConfigHostileYAML: the server's config refuses each hostile document
// as manifests and profiles do (policy's TestStrictYAMLHostile), at its
// line and field. Before one decoder, a second document was ignored, the
// file had no size limit and tags such as !!binary were decoded.
func TestConfigHostileYAML(t *testing.T) {
	f := hostile.YAMLFile{Head: "listen: 127.0.0.1:0\n", Str: "data_dir", List: "piston.allow", Open: "piston: {allow: ", Close: "}"}
	for _, tt := range hostile.YAMLDocuments(f, policy.MaxFileSize, 100_000) {
		t.Run(tt.Name, func(t *testing.T) {
			c, err := server.ParseConfig("moat-server.yaml", []byte(tt.Doc))
			var fe *policy.FileError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v (%T), want a *policy.FileError", err, err)
			}
			if fe.File != "moat-server.yaml" || fe.Line != tt.Line || tt.Field != "?" && fe.Field != tt.Field {
				t.Errorf("got %s:%d field %q, want line %d field %q (%v)", fe.File, fe.Line, fe.Field, tt.Line, tt.Field, err)
			}
			if !strings.Contains(fe.Msg, tt.Msg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %q, want it to contain %q, on one line", fe.Msg, tt.Msg)
			}
			if !reflect.ValueOf(c).IsZero() {
				t.Errorf("decoded %+v despite the refusal", c)
			}
		})
	}
	// An empty file (or one of comments) is the defaults, as before.
	for _, doc := range []string{"", "# nothing yet\n"} {
		if c, err := server.ParseConfig("moat-server.yaml", []byte(doc)); err != nil || c.Listen != "127.0.0.1:8080" {
			t.Errorf("%q: %+v, %v", doc, c, err)
		}
	}
}
