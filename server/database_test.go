package server_test

import (
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/server"
)

// TestDatabaseURLConfig: database_url is checked when the config is read,
// and no message about it, good or bad, holds the password.
func TestDatabaseURLConfig(t *testing.T) {
	const pw = "s3cret-Pw"
	for _, tt := range []struct {
		name, url, err string
	}{
		{"postgres URL", "postgres://moat:" + pw + "@db.example:5432/moat", ""},
		{"postgresql scheme, unix socket", "postgresql:///moat?host=/run/postgresql", ""},
		{"a password in the query", "postgres://moat@db.example/moat?password=" + pw, ""},
		{"mysql", "mysql://moat:" + pw + "@db.example/moat", "database_url: mysql://moat:xxxxx@db.example/moat is not a PostgreSQL URL"},
		{"a path", "/var/lib/moat", "database_url: /var/lib/moat is not a PostgreSQL URL"},
		{"unescaped characters in the password", "postgres://moat:" + pw + "%zz@db.example/moat", "the URL does not parse; percent-encode"},
		{"a bad port", "postgres://moat:" + pw + "@db.example:99999/moat", "database_url: postgres://moat:xxxxx@db.example:99999/moat: "},
		{"a bad sslmode", "postgres://moat:" + pw + "@db.example/moat?sslmode=sometimes", "sslmode is invalid"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := server.ParseConfig("moat-server.yaml", []byte("database_url: '"+tt.url+"'\n"))
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("err = %v, want %q", err, tt.err)
			case err != nil && strings.Contains(err.Error(), pw):
				t.Fatalf("the error holds the password: %v", err)
			case err != nil && !strings.HasPrefix(err.Error(), "moat-server.yaml:1"):
				t.Errorf("the error does not name the file and line: %v", err)
			}
			if err := server.ValidateDatabaseURL(tt.url); (err == nil) != (tt.err == "") {
				t.Errorf("ValidateDatabaseURL = %v, ParseConfig %q", err, tt.err)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"postgres://moat:pw@db:5432/moat", "postgres://moat:xxxxx@db:5432/moat"},
		{"postgres://moat@db/moat?password=pw&sslmode=require", "postgres://moat@db/moat?password=xxxxx&sslmode=require"},
		{"postgres://moat@db/moat?sslpassword=pw", "postgres://moat@db/moat?sslpassword=xxxxx"},
		{"postgres://moat:pw%zz@db/moat", "(a database URL that does not parse)"},
		{"/var/lib/moat", "/var/lib/moat"},
	} {
		if got := server.RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestDatabaseEndpoints: what moat serve lets its confined process
// connect to: every host of the URL and the driver's fallbacks.
func TestDatabaseEndpoints(t *testing.T) {
	for _, tt := range []struct {
		url  string
		want []server.DatabaseEndpoint
	}{
		{"postgres://moat:pw@db.example:6432/moat?sslmode=require", []server.DatabaseEndpoint{{Host: "db.example", Port: 6432}}},
		{"postgres://moat@db.example/moat?sslmode=disable", []server.DatabaseEndpoint{{Host: "db.example", Port: 5432}}},
		{"postgres://moat@a.example:5433,b.example:5434/moat?sslmode=disable",
			[]server.DatabaseEndpoint{{Host: "a.example", Port: 5433}, {Host: "b.example", Port: 5434}}},
		{"postgres:///moat?host=/run/postgresql&sslmode=disable", []server.DatabaseEndpoint{{Host: "/run/postgresql", Port: 5432, Socket: "/run/postgresql"}}},
	} {
		got, err := server.DatabaseEndpoints(tt.url)
		if err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		if len(got) != len(tt.want) {
			t.Fatalf("%s: %+v, want %+v", tt.url, got, tt.want)
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: %+v, want %+v", tt.url, got, tt.want)
			}
		}
	}
}
