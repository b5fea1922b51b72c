package egress

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// PathSegments reads the path of u as the segments a grant's path prefix
// is compared with (package policy): split at "/", each segment
// percent-decoded. A prefix grant compares whole segments, so /v1 covers
// /v1 and /v1/users but not /v10.
//
// Only a path with one meaning is read: a path the server could resolve
// to somewhere other than its segments say is refused (an *Error with
// Rule "path") rather than cleaned, since cleaning it would send one path
// and check another. Refused are: dot segments ("." and "..") in any
// spelling (%2e, %2E%2e, ".. " and "..." as Windows servers read them,
// full-width dots), also before a ";" (Tomcat's /v1/..;/admin); an
// encoded "/" or "\" inside a segment (%2f, %5c), which a server may
// decode before it routes; an encoded "%" (%25), since a server, proxy
// or framework that decodes twice reads %252e%252e as %2e%2e and then as
// "..", and which of them does is not the host's to know; a backslash, which some servers read as "/";
// empty segments ("//"), which servers merge or not; control bytes
// (%00 ends the path for some) and bytes that are not UTF-8 once decoded
// (%c0%ae is an overlong "." for others). A trailing "/" is allowed: it
// names the same place as the path without it, for a prefix.
func PathSegments(u *url.URL) ([]string, error) {
	p := u.EscapedPath()
	if p == "" || p == "/" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, refuse("path", "the path %q is not absolute", clip(p))
	}
	raw := strings.Split(p[1:], "/")
	if raw[len(raw)-1] == "" {
		raw = raw[:len(raw)-1] // one trailing slash
	}
	segs := make([]string, 0, len(raw))
	for _, r := range raw {
		if r == "" {
			return nil, refuse("path", "the path %s has an empty segment (//); servers merge them or not, so a path prefix could not say where it leads", clip(p))
		}
		if strings.ContainsRune(r, '\\') {
			return nil, refuse("path", "the path %s has a backslash, which some servers read as a /", clip(p))
		}
		s, err := url.PathUnescape(r)
		if err != nil {
			return nil, refuse("path", "the path %s has a bad percent-encoding", clip(p))
		}
		switch {
		case strings.Contains(s, "%"):
			return nil, refuse("path", "the path %s has an encoded %% (%%25), which a server that decodes twice reads as another escape (%%252e%%252e is .. to it): write the path without it", clip(p))
		case strings.ContainsAny(s, `/\`):
			return nil, refuse("path", "the path %s has an encoded / or \\ inside a segment (%%2f, %%5c), which a server may decode before it routes", clip(p))
		case !utf8.ValidString(s):
			return nil, refuse("path", "the path %s decodes to bytes that are not UTF-8 (an overlong encoding of . or / in some servers' eyes)", clip(p))
		case strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }):
			return nil, refuse("path", "the path %s has a control character once decoded (a server may end the path at %%00)", clip(p))
		}
		name, _, _ := strings.Cut(s, ";")
		if dotSegment(name) {
			return nil, refuse("path", "the path %s has a dot segment (%q once decoded), which climbs or stays where a server resolves it: write the path it leads to", clip(p), clip(s))
		}
		segs = append(segs, s)
	}
	return segs, nil
}

// dotSegment reports whether s is a segment a server may resolve as "."
// or "..": made only of dots (ASCII or the look-alikes servers normalize)
// and spaces, with at least one dot. "..." and ". ." are among them: IIS
// trims trailing dots and spaces.
func dotSegment(s string) bool {
	dots := 0
	for _, r := range s {
		switch r {
		case '.', '\uff0e', '\u2024', '\ufe52', '\u3002', '\uff61':
			dots++
		case ' ':
		default:
			return false
		}
	}
	return dots > 0
}

// HasPathPrefix reports whether the segments of path start with those of
// prefix: whole segments, so [v1] is a prefix of [v1 users] and not of
// [v10].
func HasPathPrefix(path, prefix []string) bool {
	if len(prefix) > len(path) {
		return false
	}
	for i := range prefix {
		if path[i] != prefix[i] {
			return false
		}
	}
	return true
}
