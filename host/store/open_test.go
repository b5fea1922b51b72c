package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/store"
)

// TestOpenSelectsBackend: Open picks the backend from its argument, and
// a URL it cannot serve is refused with the fix, never with the password.
func TestOpenSelectsBackend(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		arg  string
		says []string
		hide string
	}{
		{"empty", "", []string{"empty directory"}, ""},
		{"unknown scheme", "mysql://u:hunter2@db/moat", []string{`no storage backend for scheme "mysql"`, "sqlite"}, "hunter2"},
		// This package does not link the PostgreSQL backend in.
		{"postgres not linked in", "postgres://moat:hunter2@db:5432/moat", []string{`scheme "postgres"`, "host/store/postgres"}, "hunter2"},
		{"postgresql not linked in", "postgresql://db/moat?password=hunter2", []string{`scheme "postgresql"`, "host/store/postgres"}, "hunter2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := store.Open(ctx, tt.arg)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", tt.arg)
			}
			for _, w := range tt.says {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tt.hide != "" && strings.Contains(err.Error(), tt.hide) {
				t.Errorf("error %q shows the password", err)
			}
		})
	}

	// A plain directory is SQLite, as it always was.
	dir := t.TempDir()
	s, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := dir + "/" + store.FileName; s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
}
