package policy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Page is a page of a module's own user interface, which moat serve's
// console shows to the people its access requirements admit, in a
// sandboxed frame (docs/SECURITY.md, "Pages"). Its files are among the
// plugin's files, beside moat.yaml: Entry, the HTML document, and Files,
// the scripts, styles and images it loads by relative URL.
//
// Roles and Permissions mean what an action's do, and are checked by the
// same function (Profile.AuthorizePage): a page is for those who hold one
// of its roles and every one of its permissions. A page that may be
// opened still calls its module's actions as the person who opened it,
// each authorized on its own: a page's requirements decide who sees the
// page, never what its calls may do.
type Page struct {
	Name        string   `yaml:"name"`
	Title       string   `yaml:"title,omitempty"` // default Name
	Entry       string   `yaml:"entry"`           // the HTML file, like index.html
	Files       []string `yaml:"files,omitempty"` // its scripts, styles and images, like [app.js, style.css]
	Roles       []string `yaml:"roles,omitempty"`
	Permissions []string `yaml:"permissions,omitempty"`
}

// PageBridgeFile is the file name of the bridge a page loads to reach its
// module (the console answers its messages). The server serves its own
// copy under this name to every page, so a plugin cannot ship one.
const PageBridgeFile = "moat-page.js"

// Bounds on pages: they are read from every manifest and listed to every
// signed-in person.
const (
	maxPages     = 32
	maxPageFiles = 64
	maxTitleLen  = 200
)

var (
	// Page names are a path segment of the console's and the API's URLs.
	pageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	// A page's files are plain file names beside moat.yaml: an upload
	// is flattened to base names, and the server serves them under the
	// page's URL by that name alone.
	pageFileRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// pageFileTypes are the extensions a page's files may have, with the
// content type they are served as: a fixed table, so that what the
// browser is told a file is comes from moat, not from the plugin.
var pageFileTypes = map[string]string{
	".html":  "text/html; charset=utf-8",
	".htm":   "text/html; charset=utf-8",
	".js":    "text/javascript; charset=utf-8",
	".mjs":   "text/javascript; charset=utf-8",
	".css":   "text/css; charset=utf-8",
	".json":  "application/json",
	".svg":   "image/svg+xml",
	".png":   "image/png",
	".jpg":   "image/jpeg",
	".jpeg":  "image/jpeg",
	".gif":   "image/gif",
	".webp":  "image/webp",
	".ico":   "image/x-icon",
	".woff2": "font/woff2",
	".txt":   "text/plain; charset=utf-8",
}

// PageFileType returns the content type a page's file is served as, and
// false for a name whose extension no page file may have.
func PageFileType(name string) (string, bool) {
	t, ok := pageFileTypes[strings.ToLower(filepath.Ext(name))]
	return t, ok
}

func pageFileExts() string {
	exts := make([]string, 0, len(pageFileTypes))
	for e := range pageFileTypes {
		exts = append(exts, e)
	}
	slices.Sort(exts)
	return strings.Join(exts, " ")
}

// Page returns the page named name.
func (m *Manifest) Page(name string) (*Page, bool) {
	for i := range m.Pages {
		if m.Pages[i].Name == name {
			return &m.Pages[i], true
		}
	}
	return nil, false
}

// PageFiles returns the names of every page's files (entries and
// assets), sorted, without duplicates: what a plugin must ship beside
// its code.
func (m *Manifest) PageFiles() []string {
	var out []string
	for _, p := range m.Pages {
		out = append(out, p.Entry)
		out = append(out, p.Files...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// HasFile reports whether name is one of the page's files.
func (p *Page) HasFile(name string) bool {
	return name == p.Entry || slices.Contains(p.Files, name)
}

// CheckPageFiles checks that every page's files are among the plugin's
// files (has reports whether one is), at load: a page whose entry is
// missing would otherwise be listed to people and fail when opened. The
// error names the page and the fix.
func (m *Manifest) CheckPageFiles(has func(name string) bool) error {
	for i, p := range m.Pages {
		for _, f := range append([]string{p.Entry}, p.Files...) {
			if !has(f) {
				what := "file"
				if f == p.Entry {
					what = "entry"
				}
				return fmt.Errorf("%s: pages[%d] (%s): its %s %s is not among the plugin's files; add %s beside %s, or fix the name in pages[%d]",
					manifestName(m), i, p.Name, what, f, f, ManifestFile, i)
			}
		}
	}
	return nil
}

// checkPages validates pages: names, titles, files and access
// requirements. Whether the files exist is CheckPageFiles', at load,
// where the plugin's files are known.
func checkPages(ix *index, m *Manifest) error {
	if len(m.Pages) > maxPages {
		return ix.Errorf("pages", "has %d pages; the most is %d", len(m.Pages), maxPages)
	}
	if len(m.Pages) > 0 && m.Kind == KindWASICommand {
		return ix.Errorf("pages", "a wasi-command module has no actions for a page to call; remove pages, or set kind: moat")
	}
	seen := map[string]int{}
	for i := range m.Pages {
		pg := &m.Pages[i]
		p := fmt.Sprintf("pages[%d]", i)
		switch {
		case pg.Name == "":
			return ix.Errorf(p+".name", "a page needs a name; add name: notes")
		case !pageNameRE.MatchString(pg.Name):
			return ix.Errorf(p+".name", "%q is not a valid page name; use 1-64 characters a-z 0-9 _ - starting with a letter or digit, like notes", pg.Name)
		}
		if j, dup := seen[pg.Name]; dup {
			return ix.Errorf(p+".name", "page %q is already declared as pages[%d]; page names must be unique", pg.Name, j)
		}
		seen[pg.Name] = i
		if pg.Title == "" {
			pg.Title = pg.Name
		} else if len(pg.Title) > maxTitleLen || strings.ContainsFunc(pg.Title, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return ix.Errorf(p+".title", "must be at most %d printable characters on one line", maxTitleLen)
		}
		if pg.Entry == "" {
			return ix.Errorf(p+".entry", "page %s needs its HTML file; add entry: index.html (a file beside %s)", pg.Name, ManifestFile)
		}
		if len(pg.Files) > maxPageFiles {
			return ix.Errorf(p+".files", "page %s lists %d files; the most is %d", pg.Name, len(pg.Files), maxPageFiles)
		}
		files := append([]string{pg.Entry}, pg.Files...)
		for j, f := range files {
			fp := p + ".entry"
			if j > 0 {
				fp = fmt.Sprintf("%s.files[%d]", p, j-1)
			}
			typ, ok := PageFileType(f)
			switch {
			case !pageFileRE.MatchString(f) || strings.Contains(f, ".."):
				return ix.Errorf(fp, "%q must be a plain file name beside %s, like app.js (no directories, no ..)", f, ManifestFile)
			case f == PageBridgeFile:
				return ix.Errorf(fp, "%s is the bridge the server serves to every page; remove it from the list (load it with <script src=\"%s\">) and do not ship a copy", f, f)
			case !ok:
				return ix.Errorf(fp, "%q has an extension pages may not serve; use one of %s", f, pageFileExts())
			case j == 0 && !strings.HasPrefix(typ, "text/html"):
				return ix.Errorf(fp, "%q is not an HTML file; the entry is the page's document, like index.html", f)
			case slices.Index(files, f) != j:
				return ix.Errorf(fp, "%q is listed twice in page %s", f, pg.Name)
			}
		}
		if err := checkTokens(ix, p+".roles", "role", pg.Roles); err != nil {
			return err
		}
		if err := checkTokens(ix, p+".permissions", "permission", pg.Permissions); err != nil {
			return err
		}
	}
	return nil
}

// AuthorizePage decides whether who may open the page named page of
// module m, by the rule an action's Roles and Permissions follow (see
// Authorize; one function decides both). It returns nil or a
// *DeniedError whose Rule names the manifest's entry.
func (p *Profile) AuthorizePage(m *Manifest, page string, who Principal) error {
	user := who.User + "@" + who.Org
	d := &DeniedError{Module: m.Name, Principal: user}
	if err := who.Validate(); err != nil {
		d.Rule, d.Reason = "principal", err.Error()
		return d
	}
	i := slices.IndexFunc(m.Pages, func(pg Page) bool { return pg.Name == page })
	if i < 0 {
		d.Rule, d.Reason = "manifest pages", fmt.Sprintf("page %q is not declared in %s", page, manifestName(m))
		return d
	}
	return p.checkAccess(d, fmt.Sprintf("manifest pages[%d]", i), "page "+page, m.Pages[i].Roles, m.Pages[i].Permissions, who)
}
