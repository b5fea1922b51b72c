package languages

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// ValidateCommon applies the checks every language shares: the total size
// and number of files, UTF-8 text, and file names that stay inside the
// submission (relative, slash-separated, no "..", no NUL, no duplicates,
// no name that is also another's directory).
// Each Violation names the file and says how to fix it. A language's
// Validate calls it first and adds its own static checks.
//
// Names are checked before anything touches the disk: the executor and the
// compilers write files under a job directory by these names, so a name
// that could escape it ("../x", "/etc/passwd") must never get that far.
func ValidateCommon(src Source, p ValidationProfile) []Violation {
	maxBytes, maxFiles := p.MaxSourceBytes, p.MaxFiles
	if maxBytes <= 0 {
		maxBytes = DefaultMaxSourceBytes
	}
	if maxFiles <= 0 {
		maxFiles = DefaultMaxFiles
	}
	var vs []Violation
	add := func(rule, file, format string, args ...any) {
		vs = append(vs, Violation{Rule: rule, File: file, Message: fmt.Sprintf(format, args...)})
	}
	if len(src.Files) == 0 {
		add(RuleFiles, "", "the submission has no files: send at least the entry file")
		return vs
	}
	if len(src.Files) > maxFiles {
		add(RuleFiles, "", "%d files is more than the limit of %d: merge files or drop unused ones", len(src.Files), maxFiles)
	}
	var total int64
	seen := make(map[string]bool, len(src.Files))
	for i, f := range src.Files {
		total += int64(len(f.Content))
		label := f.Name
		if label == "" {
			label = fmt.Sprintf("#%d", i+1)
		}
		if msg := checkName(f.Name); msg != "" {
			add(RulePath, label, "%s", msg)
		} else {
			key := path.Clean(f.Name)
			if seen[key] {
				add(RulePath, label, "the name appears twice in the submission: give each file a unique name")
			}
			seen[key] = true
		}
		if !utf8.Valid(f.Content) {
			line, col := firstInvalidUTF8(f.Content)
			vs = append(vs, Violation{Rule: RuleEncoding, File: label, Line: line,
				Message: fmt.Sprintf("invalid UTF-8 at byte %d of the line (column %d): save the file as UTF-8", col, col)})
		}
	}
	// A name that is also another's directory ("a" and "a/b") cannot be
	// written: refuse it here rather than fail moat's own write.
	for _, f := range src.Files {
		if checkName(f.Name) != "" {
			continue
		}
		for dir := path.Dir(path.Clean(f.Name)); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				add(RulePath, f.Name, "%s is also a file in the submission: a name cannot be both a file and a directory; rename one of them", dir)
				break
			}
		}
	}
	if total > maxBytes {
		add(RuleSize, "", "the source is %d bytes, over the limit of %d: send less code (or ask the operator for a larger max_source_bytes)", total, maxBytes)
	}
	if src.Main != "" && !seen[path.Clean(src.Main)] {
		add(RuleFiles, src.Main, "the entry file named by main is not among the files: add it or name one of the files")
	}
	return vs
}

// Violation rules used by ValidateCommon; language checks use RuleDeny.
const (
	RuleSize     = "size"
	RuleFiles    = "files"
	RuleEncoding = "encoding"
	RulePath     = "path"
	// RuleDeny: a construct the profile's Deny list refuses
	// ("import:net", "include:sys/socket.h").
	RuleDeny = "deny"
)

// checkName returns why a file name is unsafe, or "".
func checkName(name string) string {
	switch {
	case name == "":
		return "the file has no name: give it a relative name such as main.c"
	case strings.ContainsRune(name, 0):
		return "the name contains a NUL byte: use a plain relative name"
	case !utf8.ValidString(name):
		return "the name is not valid UTF-8: use a plain relative name"
	case strings.HasPrefix(name, "/") || strings.Contains(name, "\\") || (len(name) >= 2 && name[1] == ':'):
		return "absolute paths are not allowed: use a name relative to the submission, such as src/main.c"
	case len(name) > 255:
		return "the name is longer than 255 bytes: shorten it"
	}
	for _, part := range strings.Split(name, "/") {
		switch part {
		case "..":
			return `".." is not allowed in a file name: name files relative to the submission, without leaving it`
		case "", ".":
			return `the name has an empty or "." element: write it as a clean relative path such as src/main.c`
		}
		if strings.HasPrefix(part, ".") && len(part) > 1 && strings.Trim(part, ".") == "" {
			return "a name element made only of dots is not allowed: rename it"
		}
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return "the name contains a control character: use printable characters only"
		}
	}
	return ""
}

// firstInvalidUTF8 returns the 1-based line and byte column of the first
// invalid UTF-8 sequence in b.
func firstInvalidUTF8(b []byte) (line, col int) {
	line, col = 1, 1
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col += n
		}
		b = b[n:]
	}
	return line, col
}

// DenyLines is a helper for a language's static checks: for each rule in
// p.Deny that starts with prefix (such as "import:"), it calls match on
// every line of every file with the rest of the rule ("net"), and reports a
// RuleDeny violation where match returns true. It is deliberately
// lexical: a profile's Deny list is a policy signal checked before the
// compiler runs, not a security boundary (the sandbox is).
func DenyLines(src Source, p ValidationProfile, prefix string, match func(line, target string) bool) []Violation {
	var targets []string
	for _, d := range p.Deny {
		if t, ok := strings.CutPrefix(d, prefix); ok && t != "" {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		return nil
	}
	var vs []Violation
	for _, f := range src.Files {
		for i, line := range strings.Split(string(f.Content), "\n") {
			for _, t := range targets {
				if match(line, t) {
					vs = append(vs, Violation{Rule: RuleDeny, File: f.Name, Line: i + 1,
						Message: fmt.Sprintf("%s%s is denied by the validation profile: remove it", prefix, t)})
				}
			}
		}
	}
	return vs
}
