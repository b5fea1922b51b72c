package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/server"
)

// recordingBuilder is the languages' own ScriptBuilder (bundle.Builder),
// recording what it builds, or refusing every build when refuse is set.
type recordingBuilder struct {
	mu     sync.Mutex
	built  []string
	refuse error
}

var _ bundle.ScriptBuilder = (*recordingBuilder)(nil)

func (b *recordingBuilder) BuildScript(ctx context.Context, l languages.Language, src languages.Source, dir string) (*languages.ScriptPlugin, error) {
	b.mu.Lock()
	b.built = append(b.built, l.Info().Name+":"+src.Main)
	b.mu.Unlock()
	if b.refuse != nil {
		return nil, b.refuse
	}
	return bundle.Builder{}.BuildScript(ctx, l, src, dir)
}

func (b *recordingBuilder) builds() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.built...)
}

// TestScriptBuilderSeam: the server builds an uploaded interpreted plugin
// through its Config's ScriptBuilder, at upload and again at its reload
// after a restart, and a builder's refusal refuses the upload with its
// reason: the server's one door to the languages for plugins.
func TestScriptBuilderSeam(t *testing.T) {
	dir := t.TempDir()
	rb := &recordingBuilder{}
	withBuilder := func(c *server.Config) { c.ScriptBuilder = rb }
	ts := start(t, dir, withBuilder)
	key := ts.key(t, "acme", "ann", "admin")
	if r := ts.do(t, "POST", "/v1/modules", key, scriptArchive(t, "hello-js", nil), "Content-Type", "application/gzip"); r.status != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	ts.stop(t)
	// The upload's load, and the sync of its own change when it came
	// before the commit (loaded, then dropped): one or two builds.
	atUpload := rb.builds()
	if len(atUpload) == 0 || !strings.HasSuffix(atUpload[0], ":main.js") {
		t.Fatalf("builds at upload = %v, want main.js's", atUpload)
	}

	ts2 := start(t, dir, withBuilder)
	if r := ts2.do(t, "POST", "/v1/modules/hello-js/actions/greet", key, strings.NewReader("World")); r.status != http.StatusOK {
		t.Fatalf("after restart: %d %s", r.status, r.body)
	}
	if got := rb.builds(); len(got) <= len(atUpload) {
		t.Errorf("builds after the reload = %v, want more than the upload's %d", got, len(atUpload))
	}
	ts2.stop(t)

	refusing := &recordingBuilder{refuse: errors.New("this server builds no javascript plugins")}
	ts3 := start(t, t.TempDir(), func(c *server.Config) { c.ScriptBuilder = refusing })
	key3 := ts3.key(t, "acme", "ann", "admin")
	r := ts3.do(t, "POST", "/v1/modules", key3, scriptArchive(t, "hello-js", nil), "Content-Type", "application/gzip")
	if r.status == http.StatusCreated || !strings.Contains(string(r.body), "this server builds no javascript plugins") {
		t.Errorf("upload through a refusing builder: %d %s, want a refusal with its reason", r.status, r.body)
	}
}
