package policy

import (
	"fmt"
	"path"
	"strings"

	"gopkg.in/yaml.v3"
)

// FileGrant is one directory of the filesystem capability: a module asks
// for it in moat.yaml, a profile grants it, and the host makes it a WASI
// preopen at the same path inside the guest (and, for a native plugin, a
// bind mount in its root with a Landlock rule).
//
// It is read-only unless RW says otherwise, on both sides: a module gets
// write access only when it asks for it and the profile grants it, so an
// operator who wrote a path without thinking about writes never granted
// them. In YAML a grant is a path, read-only:
//
//	filesystem: [/srv/data]
//
// or read-write, as a path ending in :rw or as a mapping:
//
//	filesystem: [/srv/out:rw]
//	filesystem: [{path: /srv/out, rw: true}]
//
// (":ro" may be written too, and means what a bare path means.) A
// directory whose own name ends in ":rw" or ":ro" is written in the
// mapping form.
type FileGrant struct {
	Path string `yaml:"path" json:"path"`
	RW   bool   `yaml:"rw,omitempty" json:"rw,omitempty"`
}

// fileGrantObject is the mapping form of FileGrant, for the strict check.
type fileGrantObject struct {
	Path string `yaml:"path"`
	RW   bool   `yaml:"rw,omitempty"`
}

// String is the grant as a scalar: the path, with ":rw" when it is
// read-write. Refusals and reports name grants this way.
func (g FileGrant) String() string {
	if g.RW {
		return g.Path + ":rw"
	}
	return g.Path
}

// Mode is "read-only" or "read-write", for messages.
func (g FileGrant) Mode() string {
	if g.RW {
		return "read-write"
	}
	return "read-only"
}

// parseFileGrant reads the scalar form.
func parseFileGrant(s string) FileGrant {
	if p, ok := strings.CutSuffix(s, ":rw"); ok {
		return FileGrant{Path: p, RW: true}
	}
	if p, ok := strings.CutSuffix(s, ":ro"); ok {
		return FileGrant{Path: p}
	}
	return FileGrant{Path: s}
}

// UnmarshalYAML accepts a path (with an optional :rw or :ro) or a mapping
// {path, rw}.
func (g *FileGrant) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*g = parseFileGrant(n.Value)
		return nil
	case yaml.MappingNode:
		var o fileGrantObject
		if err := n.Decode(&o); err != nil {
			return err
		}
		*g = FileGrant(o)
		return nil
	}
	return newNodeError(n, "expected a path like /srv/data (read-only), /srv/out:rw, or {path: /srv/out, rw: true}")
}

// MarshalYAML writes the scalar form, or the mapping when the path itself
// ends in :rw or :ro.
func (g FileGrant) MarshalYAML() (any, error) {
	if strings.HasSuffix(g.Path, ":rw") || strings.HasSuffix(g.Path, ":ro") {
		return fileGrantObject(g), nil
	}
	return g.String(), nil
}

// MaxFilePathLen bounds a granted path: PATH_MAX less its NUL.
const MaxFilePathLen = 4095

// ForbiddenFileRoots are the trees no grant may reach, whoever writes it:
// /proc (every process's memory, environment and open files, the host's
// own secrets among them), /sys (the kernel's knobs) and /dev (devices). The
// host adds its own data and cache directories when it loads a module
// (host.Load), since only it knows them.
var ForbiddenFileRoots = []string{"/proc", "/sys", "/dev"}

// CheckFilePath says what is wrong with p as a granted directory, or
// returns nil: it must be absolute and clean (no "..", no "//", no trailing
// "/"), hold no NUL, not be "/" and not lie in ForbiddenFileRoots. The
// message names the fix.
func CheckFilePath(p string) error {
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%q holds a NUL byte, which no path can; remove it", p)
	case len(p) > MaxFilePathLen:
		return fmt.Errorf("the path is %d bytes; the limit is %d (PATH_MAX)", len(p), MaxFilePathLen)
	case !path.IsAbs(p) || path.Clean(p) != p:
		return fmt.Errorf("%q must be an absolute, clean path (no .., no //, no trailing /), like %s", p, cleanAbs(p))
	case p == "/":
		return fmt.Errorf("/ is the whole machine, with /proc, /sys, /dev and moat's own data in it; grant the directories a module needs, like /srv/data")
	}
	for _, f := range ForbiddenFileRoots {
		if PathWithin(p, f) {
			return fmt.Errorf("%s is under %s, which no grant may reach: %s", p, f, forbiddenWhy(f))
		}
	}
	return nil
}

func forbiddenWhy(root string) string {
	switch root {
	case "/proc":
		return "it shows every process's memory, environment and open files, the host's own secrets among them"
	case "/sys":
		return "it holds the kernel's and the devices' settings"
	}
	return "it holds the machine's devices"
}

// PathWithin reports whether p is dir or lies under it, comparing whole
// path elements: /data is within /data and /, but /database is not within
// /data. Both are clean absolute paths.
func PathWithin(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// fileCovered reports whether a granted directory covers p, and whether
// one that does grants writes.
func fileCovered(granted []FileGrant, p string) (covered, rw bool) {
	for _, g := range granted {
		if PathWithin(p, g.Path) {
			covered = true
			rw = rw || g.RW
		}
	}
	return covered, rw
}

func fileList(gs []FileGrant) string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = g.String()
	}
	return list(s)
}

// checkFileGrants validates the directories of a Paths capability written
// at path. A manifest
// (grant false) may not ask for one directory inside another: the outer
// one's preopen already reaches the inner one, so a read-only inner grant
// would promise what the outer read-write one breaks.
func checkFileGrants(ix *index, path string, gs []FileGrant, grant bool) error {
	name := path[strings.LastIndexByte(path, '.')+1:]
	for i, g := range gs {
		p := fmt.Sprintf("%s[%d]", path, i)
		if err := CheckFilePath(g.Path); err != nil {
			return ix.Errorf(p, "%v", err)
		}
		for j, o := range gs[:i] {
			switch {
			case o.Path == g.Path:
				return ix.Errorf(p, "%s is listed twice (also at [%d]); keep one, with the mode the module needs", g.Path, j)
			case !grant && (PathWithin(g.Path, o.Path) || PathWithin(o.Path, g.Path)):
				return ix.Errorf(p, "%s and %s (%s[%d]) overlap: a module sees one directory through one grant; ask for the outer one, with the mode the module needs", g.Path, o.Path, name, j)
			}
		}
	}
	return nil
}

// FileGrants lists every directory p grants anywhere (its default, each
// module's and key's grant and their trusted parts): what a host serving
// modules under p may have to open, so its own Landlock layer must allow
// them (read, and write for a read-write grant).
func (p *Profile) FileGrants() []FileGrant {
	var out []FileGrant
	p.eachGrant(func(g *Grant) { out = append(out, g.Capabilities.Filesystem...) })
	return out
}
