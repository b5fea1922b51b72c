package plugintree_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/internal/plugintree"
	"github.com/moat-sandbox/moat/internal/testenv"
)

const secret = "SECRET-7f3a9c-do-not-leak"

// hostile is a tree with one hostile entry, made by make in dir (the
// plugin's directory) with out (a directory outside it holding
// id_ed25519, whose content is secret).
type hostile struct {
	name  string
	entry string // the refused entry, relative to the plugin's directory
	make  func(t *testing.T, dir, out string)
	want  string // in the error
}

func symlink(old, new string) func(t *testing.T, dir, out string) {
	return func(t *testing.T, dir, out string) {
		t.Helper()
		if err := os.Symlink(strings.ReplaceAll(old, "OUT", out), filepath.Join(dir, new)); err != nil {
			t.Fatal(err)
		}
	}
}

var cases = []hostile{
	{"link to a file outside", "helpers.js", symlink("OUT/id_ed25519", "helpers.js"), "helpers.js is a symbolic link (to "},
	{"link to a directory outside", "lib", symlink("OUT", "lib"), "lib is a symbolic link (to "},
	{"link inside the tree", "alias.js", symlink("main.js", "alias.js"), "alias.js is a symbolic link (to main.js)"},
	{"link loop", "a.js", func(t *testing.T, dir, out string) {
		symlink("b.js", "a.js")(t, dir, out)
		symlink("a.js", "b.js")(t, dir, out)
	}, "a.js is a symbolic link (to b.js)"},
	{"link to itself", "self", symlink("self", "self"), "self is a symbolic link (to self)"},
	{"link to the directory", "up", symlink(".", "up"), "up is a symbolic link (to .)"},
	{"link in a subdirectory", "sub/key.js", func(t *testing.T, dir, out string) {
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		symlink("OUT/id_ed25519", "sub/key.js")(t, dir, out)
	}, "key.js is a symbolic link"},
	{"FIFO", "pipe.js", func(t *testing.T, dir, out string) {
		if err := syscall.Mkfifo(filepath.Join(dir, "pipe.js"), 0o644); err != nil {
			t.Fatal(err)
		}
	}, "pipe.js is a FIFO (named pipe): a plugin's directory may hold only regular files and directories"},
	{"socket", "sock", func(t *testing.T, dir, out string) {
		l, err := net.Listen("unix", filepath.Join(dir, "sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}, "sock is a socket"},
	{"device", "null.js", func(t *testing.T, dir, out string) {
		testenv.Require(t, func() string {
			if os.Geteuid() != 0 {
				return "making a device node needs root"
			}
			return ""
		}())
		if err := syscall.Mknod(filepath.Join(dir, "null.js"), syscall.S_IFCHR|0o644, 1<<8|3); err != nil {
			t.Fatal(err)
		}
	}, "null.js is a character device"},
}

// plant makes a plugin directory holding main.js and the hostile entry,
// and a secret outside it.
func plant(t *testing.T, h hostile) (dir string) {
	t.Helper()
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "id_ed25519"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.js"), []byte("console.log(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.make(t, dir, out)
	return dir
}

// timeout fails t if f has not returned in 5 s (a FIFO opened blocks).
func timeout(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the read hung (a FIFO opened?)")
		return nil
	}
}

// TestWalkRefuses: Walk refuses every link (out of the tree, into it,
// loops) and special file with an *Error naming it and its kind, whatever
// its name's extension, in Flat and full walks, and reads none of the
// secret's bytes.
func TestWalkRefuses(t *testing.T) {
	for _, h := range cases {
		for _, opt := range []plugintree.Options{{}, {Flat: true}, {SkipOutputs: true}} {
			t.Run(h.name, func(t *testing.T) {
				dir := plant(t, h)
				if h.entry == "sub/key.js" && opt.Flat {
					t.Skip("a flat walk does not enter sub")
				}
				var read []byte
				err := timeout(t, func() error {
					return plugintree.Walk(dir, opt, func(e plugintree.Entry) error {
						if e.Info.IsDir() {
							return nil
						}
						b, err := e.Read()
						read = append(read, b...)
						return err
					})
				})
				var te *plugintree.Error
				if !errors.As(err, &te) || !strings.Contains(err.Error(), h.want) {
					t.Fatalf("Walk: %v; want an *Error with %q", err, h.want)
				}
				if te.Path != filepath.Join(dir, h.entry) {
					t.Errorf("Error.Path %q, want %q", te.Path, filepath.Join(dir, h.entry))
				}
				if strings.Contains(string(read), secret) || strings.Contains(err.Error(), secret) {
					t.Error("the secret's bytes were read")
				}
			})
		}
	}
}

// TestReadFileRefuses: ReadFile refuses the same entries by name, without
// opening a FIFO, and reads a regular file.
func TestReadFileRefuses(t *testing.T) {
	for _, h := range cases {
		t.Run(h.name, func(t *testing.T) {
			dir := plant(t, h)
			var b []byte
			err := timeout(t, func() error {
				var err error
				b, err = plugintree.ReadFile(dir, h.entry)
				return err
			})
			if !plugintree.IsError(err) || !strings.Contains(err.Error(), h.want) || b != nil {
				t.Fatalf("ReadFile(%s): %q, %v; want an *Error with %q", h.entry, b, err, h.want)
			}
		})
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "moat.yaml"), []byte("name: x\n"), 0o644)
	if b, err := plugintree.ReadFile(dir, "moat.yaml"); err != nil || string(b) != "name: x\n" {
		t.Errorf("a regular file: %q %v", b, err)
	}
	if _, err := plugintree.ReadFile(dir, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := plugintree.ReadFile(dir, "../x"); !plugintree.IsError(err) {
		t.Errorf("a path with ..: %v, want refused", err)
	}
}

// TestWalkSkipsOutputs: SkipOutputs leaves dot entries, node_modules and
// target unread whatever they are (a link named .env is not followed, nor
// refused), and the plugin's own files are visited.
func TestWalkSkipsOutputs(t *testing.T) {
	dir := t.TempDir()
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "id"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(dir, "main.js"), []byte("x"), 0o644)
	os.Symlink(filepath.Join(out, "id"), filepath.Join(dir, ".env"))
	os.Symlink(out, filepath.Join(dir, "node_modules"))
	os.Mkdir(filepath.Join(dir, "target"), 0o755)
	syscall.Mkfifo(filepath.Join(dir, "target", "p"), 0o644)
	var got []string
	err := plugintree.Walk(dir, plugintree.Options{SkipOutputs: true}, func(e plugintree.Entry) error {
		got = append(got, e.Rel)
		return nil
	})
	if err != nil || strings.Join(got, ",") != "main.js" {
		t.Fatalf("Walk: %v %v; want main.js alone", got, err)
	}
}

// TestWalkBounds: more files than MaxFiles, or more bytes than MaxBytes,
// are refused naming the bound; what was read stops at the bound.
func TestWalkBounds(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(dir, n), make([]byte, 600<<10), 0o644)
	}
	read := func(opt plugintree.Options) error {
		return plugintree.Walk(dir, opt, func(e plugintree.Entry) error {
			_, err := e.Read()
			return err
		})
	}
	if err := read(plugintree.Options{MaxFiles: 2}); !plugintree.IsError(err) || !strings.Contains(err.Error(), "holds more than 2 files") {
		t.Errorf("MaxFiles: %v", err)
	}
	if err := read(plugintree.Options{MaxBytes: 1 << 20}); !plugintree.IsError(err) || !strings.Contains(err.Error(), "holds more than 1 MiB") {
		t.Errorf("MaxBytes: %v", err)
	}
	if err := read(plugintree.Options{}); err != nil {
		t.Errorf("within the defaults: %v", err)
	}
}

// TestRefusesByMode: the rule for an entry known by its mode alone (an
// uploaded archive's) refuses what Walk refuses, named as Walk names it,
// and passes regular files and directories.
func TestRefusesByMode(t *testing.T) {
	for _, tc := range []struct {
		mode fs.FileMode
		what string
	}{
		{0o644, ""},
		{fs.ModeDir | 0o755, ""},
		{fs.ModeSymlink | 0o777, "symbolic link"},
		{fs.ModeNamedPipe | 0o644, "FIFO (named pipe)"},
		{fs.ModeSocket | 0o644, "socket"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "character device"},
		{fs.ModeDevice | 0o660, "device"},
	} {
		what, refused := plugintree.Refuses(tc.mode)
		if what != tc.what || refused != (tc.what != "") {
			t.Errorf("Refuses(%v) = %q, %v; want %q", tc.mode, what, refused, tc.what)
		}
	}
	// The same names as Walk's refusal of the entry on disk.
	dir := t.TempDir()
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	err := plugintree.Walk(dir, plugintree.Options{}, func(plugintree.Entry) error { return nil })
	var e *plugintree.Error
	if !errors.As(err, &e) || e.Kind != "symbolic link" {
		t.Errorf("Walk of a link: %v, want a refusal of kind %q", err, "symbolic link")
	}
}
