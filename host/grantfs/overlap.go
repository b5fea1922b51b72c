package grantfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Overlap reports whether the directories a and b (absolute, symlinks
// resolved) are one directory, or one holds the other, judged by what
// they are rather than by their names: a bind mount shows a directory at
// a second path, which no comparison of paths sees, so a grant of a bind
// mount of the data directory (or of a parent of one, or of a directory
// inside one) would reach the store. It compares:
//
//   - the device and inode of each directory with those of the other and
//     of every directory above it (a is b, or a lies within b, through
//     any bind mount on the way up; and the other way round);
//   - where each lies in its filesystem (the device, the directory its
//     mount shows, and the rest of its path): a directory inside a bind
//     mount of a directory inside the data directory is within it;
//   - every mount point below each with the other and what lies above
//     it, and every mount below each that shows part of the other's
//     filesystem (/proc/self/mountinfo: the same device, and a root
//     within the other's place in that filesystem or holding it), since
//     a bind mount of the data directory placed inside a granted
//     directory is below the grant, not above it.
//
// An error (a directory that cannot be read, a mount table that cannot
// be) is returned as it is: the caller refuses the grant rather than
// guess.
func Overlap(a, b string) (bool, error) {
	ida, err := identOf(a)
	if err != nil {
		return false, err
	}
	idb, err := identOf(b)
	if err != nil {
		return false, err
	}
	upA, err := ancestry(a)
	if err != nil {
		return false, err
	}
	upB, err := ancestry(b)
	if err != nil {
		return false, err
	}
	if upA[idb] || upB[ida] {
		return true, nil
	}
	mounts, err := readMounts()
	if err != nil {
		return false, err
	}
	// Where each lies in its filesystem: a directory inside a bind mount
	// of part of the other's filesystem is not above or below it by name.
	devA, placeA, okA := placeInFS(mounts, a)
	devB, placeB, okB := placeInFS(mounts, b)
	if okA && okB && devA == devB && (within(placeA, placeB) || within(placeB, placeA)) {
		return true, nil
	}
	for _, pair := range [2][2]string{{a, b}, {b, a}} {
		below, other := pair[0], pair[1]
		upOther := upB
		if below == b {
			upOther = upA
		}
		placeDev, place, ok := placeInFS(mounts, other)
		for _, m := range mounts {
			if m.point == below || !within(m.point, below) {
				continue
			}
			if id, err := identOf(m.point); err == nil && upOther[id] {
				return true, nil // a mount below shows other or what holds it
			}
			if ok && m.dev == placeDev && (within(m.root, place) || within(place, m.root)) {
				return true, nil // a mount below shows part of other's filesystem around it
			}
		}
	}
	return false, nil
}

// ident is what a directory is, whatever path shows it.
type ident struct{ dev, ino uint64 }

func identOf(p string) (ident, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return ident{}, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	return ident{uint64(st.Dev), st.Ino}, nil
}

// ancestry is the identities of p and of every directory above it.
func ancestry(p string) (map[ident]bool, error) {
	out := map[ident]bool{}
	for {
		id, err := identOf(p)
		if err != nil {
			return nil, err
		}
		out[id] = true
		up := filepath.Dir(p)
		if up == p {
			return out, nil
		}
		p = up
	}
}

// mount is one line of /proc/self/mountinfo: the filesystem's device
// (major:minor), the directory of it the mount shows (root), and where.
type mount struct{ dev, root, point string }

func readMounts() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table to compare directories: %w", err)
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, mount{dev: fields[2], root: unescapeMount(fields[3]), point: unescapeMount(fields[4])})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the mount table to compare directories: %w", err)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// placeInFS is where directory p lies within its filesystem: the mount
// whose point is the longest that holds p, its device, and its root
// joined with the rest of p.
func placeInFS(mounts []mount, p string) (dev, place string, ok bool) {
	best := -1
	for i, m := range mounts {
		if within(p, m.point) && (best < 0 || len(m.point) >= len(mounts[best].point)) {
			best = i
		}
	}
	if best < 0 {
		return "", "", false
	}
	m := mounts[best]
	rel, err := filepath.Rel(m.point, p)
	if err != nil {
		return "", "", false
	}
	return m.dev, filepath.Join(m.root, rel), true
}

// within reports whether p is dir or lies beneath it, by name.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
