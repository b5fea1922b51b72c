package policy

import (
	"strings"

	"golang.org/x/mod/semver"
)

// CompareVersions orders two manifest versions by semantic-versioning
// precedence (semver.org, item 11): -1, 0 or +1. It is what the server's
// refusal of a signed rollback asks: is this upload's version newer than
// the current one's?
//
// The comparison is golang.org/x/mod/semver's; this only maps moat's
// version syntax (the manifest's version:, MAJOR.MINOR.PATCH with an
// optional -prerelease, no v and no +build) onto it. A version that is
// not one (an empty version of a module without a manifest, a build
// suffix, an empty prerelease identifier as in 1.0.0-a..b) sorts before
// every version that is, so a signed module cannot be "upgraded" to it;
// two such compare as strings, so that the order stays total.
func CompareVersions(a, b string) int {
	ca, oka := semverOf(a)
	cb, okb := semverOf(b)
	switch {
	case !oka && !okb:
		return strings.Compare(a, b)
	case !oka:
		return -1
	case !okb:
		return 1
	}
	return semver.Compare(ca, cb)
}

// semverOf is v as package semver reads it: with a "v", and without the
// leading zeros moat's syntax allows and semver does not (01.2.3 is
// 1.2.3, as a prerelease's 007 is 7), which is the order they had before
// moat used package semver.
func semverOf(v string) (string, bool) {
	if !versionRE.MatchString(v) {
		return "", false
	}
	core, pre, hasPre := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	for i, p := range parts {
		parts[i] = trimZeros(p)
	}
	out := "v" + strings.Join(parts, ".")
	if hasPre {
		ids := strings.Split(pre, ".")
		for i, id := range ids {
			if id != "" && strings.Trim(id, "0123456789") == "" {
				ids[i] = trimZeros(id)
			}
		}
		out += "-" + strings.Join(ids, ".")
	}
	return out, semver.IsValid(out)
}

// trimZeros drops the leading zeros of a decimal number, keeping one 0.
func trimZeros(s string) string {
	if t := strings.TrimLeft(s, "0"); t != "" {
		return t
	}
	return "0"
}
