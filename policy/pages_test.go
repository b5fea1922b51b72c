package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/policy"
)

func TestParsePages(t *testing.T) {
	m := manifest(t, "notes", `actions: [{name: list}]
pages:
  - name: notes
    title: My notes
    entry: index.html
    files: [app.js, style.css]
  - name: admin
    entry: admin.html
    roles: [admin]
    permissions: [notes.admin]
`)
	if len(m.Pages) != 2 || m.Pages[0].Title != "My notes" || m.Pages[1].Title != "admin" {
		t.Fatalf("pages = %+v; want two, the second titled by its name", m.Pages)
	}
	if got := strings.Join(m.PageFiles(), " "); got != "admin.html app.js index.html style.css" {
		t.Errorf("PageFiles = %s", got)
	}
	if pg, ok := m.Page("notes"); !ok || !pg.HasFile("app.js") || pg.HasFile("admin.html") {
		t.Errorf("Page(notes) = %+v, %v", pg, ok)
	}
}

// TestParsePagesRefused: each error names the page's field and the fix.
func TestParsePagesRefused(t *testing.T) {
	for _, tt := range []struct{ name, pages, want string }{
		{"no name", `[{entry: index.html}]`, "pages[0].name: a page needs a name"},
		{"bad name", `[{name: "Notes!", entry: index.html}]`, `pages[0].name: "Notes!" is not a valid page name`},
		{"duplicate", `[{name: a, entry: a.html}, {name: a, entry: b.html}]`, `pages[1].name: page "a" is already declared as pages[0]`},
		{"no entry", `[{name: a}]`, "pages[0].entry: page a needs its HTML file; add entry: index.html"},
		{"entry not html", `[{name: a, entry: app.js}]`, `pages[0].entry: "app.js" is not an HTML file`},
		{"directory", `[{name: a, entry: index.html, files: [js/app.js]}]`, `pages[0].files[0]: "js/app.js" must be a plain file name`},
		{"climbs", `[{name: a, entry: ../x.html}]`, `pages[0].entry: "../x.html" must be a plain file name`},
		{"dotdot", `[{name: a, entry: index.html, files: [a..js]}]`, `pages[0].files[0]: "a..js" must be a plain file name`},
		{"bridge shipped", `[{name: a, entry: index.html, files: [moat-page.js]}]`, "pages[0].files[0]: moat-page.js is the bridge the server serves"},
		{"extension", `[{name: a, entry: index.html, files: [run.sh]}]`, `pages[0].files[0]: "run.sh" has an extension pages may not serve`},
		{"twice", `[{name: a, entry: index.html, files: [a.js, a.js]}]`, `pages[0].files[1]: "a.js" is listed twice in page a`},
		{"title", `[{name: a, entry: index.html, title: "a\nb"}]`, "pages[0].title: must be at most 200 printable characters"},
		{"role", `[{name: a, entry: index.html, roles: ["a b"]}]`, `pages[0].roles[0]: "a b" is not a valid role name`},
		{"permission", `[{name: a, entry: index.html, permissions: [""]}]`, `pages[0].permissions[0]`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.ParseManifest("moat.yaml", []byte("name: n\nversion: 1.0.0\npages: "+tt.pages+"\n"))
			var fe *policy.FileError
			if err == nil || !errors.As(err, &fe) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v\nwant a *FileError containing %q", err, tt.want)
			}
		})
	}
	_, err := policy.ParseManifest("moat.yaml", []byte("name: n\nversion: 1.0.0\nkind: wasi-command\npages: [{name: a, entry: index.html}]\n"))
	if err == nil || !strings.Contains(err.Error(), "a wasi-command module has no actions for a page") {
		t.Errorf("wasi-command with pages: %v", err)
	}
}

func TestCheckPageFiles(t *testing.T) {
	m := manifest(t, "n", "pages: [{name: a, entry: index.html, files: [app.js]}]\n")
	have := map[string]bool{"index.html": true}
	err := m.CheckPageFiles(func(n string) bool { return have[n] })
	if err == nil || !strings.Contains(err.Error(), "pages[0] (a): its file app.js is not among the plugin's files; add app.js beside moat.yaml") {
		t.Errorf("missing asset: %v", err)
	}
	delete(have, "index.html")
	if err := m.CheckPageFiles(func(n string) bool { return have[n] }); err == nil || !strings.Contains(err.Error(), "its entry index.html") {
		t.Errorf("missing entry: %v", err)
	}
	have["index.html"], have["app.js"] = true, true
	if err := m.CheckPageFiles(func(n string) bool { return have[n] }); err != nil {
		t.Errorf("all there: %v", err)
	}
}

// TestAuthorizePage: a page's requirements are decided by the rule an
// action's are (one function), with the page's manifest entry as rule.
func TestAuthorizePage(t *testing.T) {
	p := profile(t, "refuse")
	m := manifest(t, "hello", `actions:
  - {name: greet, roles: [user, admin], permissions: [greet.run]}
pages:
  - {name: open, entry: index.html}
  - {name: staff, entry: staff.html, roles: [user, admin], permissions: [greet.run]}
  - {name: admins, entry: admin.html, roles: [admin]}
`)
	who := func(user string, roles ...string) policy.Principal {
		return policy.Principal{User: user, Org: "acme", Roles: roles}
	}
	for _, tt := range []struct {
		page string
		who  policy.Principal
		want string
	}{
		{"open", who("carl"), ""},
		{"staff", who("ann", "user"), ""},
		{"admins", who("bob", "admin"), ""},
		{"admins", who("ann", "user"), "denied: module hello: page admins requires one of roles [admin]; ann@acme has [user] (rule: manifest pages[2].roles)"},
		{"staff", who("ivy", "intern", "user"), ""},
		{"staff", who("dave"), "denied: module hello: page staff requires one of roles [user admin]; dave@acme has no roles (rule: manifest pages[1].roles)"},
		{"nope", who("ann", "user"), `denied: module hello: page "nope" is not declared in moat.yaml (rule: manifest pages)`},
		{"open", policy.Principal{User: "ann"}, "(rule: principal)"},
	} {
		err := p.AuthorizePage(m, tt.page, tt.who)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("AuthorizePage(%s, %s) = %v", tt.page, tt.who, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("AuthorizePage(%s, %s)\ngot  %v\nwant %s", tt.page, tt.who, err, tt.want)
		}
		// The same requirements on an action decide the same.
		if tt.page == "staff" {
			if aerr := p.Authorize(m, "greet", tt.who); (aerr == nil) != (err == nil) {
				t.Errorf("page staff and action greet disagree for %s: %v / %v", tt.who, err, aerr)
			}
		}
	}
}

// TestReportPages: `moat policy check` lists each page, who may open it
// and its files.
func TestReportPages(t *testing.T) {
	p := profile(t, "deny_at_call")
	m := manifest(t, "notes", `pages:
  - {name: notes, entry: index.html, files: [app.js]}
  - {name: admin, entry: admin.html, roles: [admin], permissions: [notes.admin]}
`)
	r := p.Evaluate(m, "").Report(m, p)
	for _, w := range []string{
		"pages    viewer needs",
		"  notes  nothing (any signed-in person)",
		"index.html app.js",
		"  admin  a role of admin; permissions notes.admin",
	} {
		if !strings.Contains(r, w) {
			t.Errorf("report lacks %q:\n%s", w, r)
		}
	}
}
