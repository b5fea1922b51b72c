// Package fsops runs one file operation described by a line of text and
// describes what the guest observed, for the file-grant tests: the plugin
// (testdata/fsguest) and the WASI command (testdata/fscmd) share it.
//
// Each line is an operation and its arguments, separated by spaces:
//
//	read P            "ok " and the content
//	write P DATA      create or truncate P, write DATA
//	append P DATA     create P if missing, append DATA
//	mkdir P | rmdir P | unlink P
//	rename A B | link A B | symlink TARGET LINK
//	utimes P          set both times to the Unix epoch + 1 s
//	list P            the names in P, sorted, comma-separated
//	keep P            open P for appending and keep the descriptor
//	writekept DATA    write DATA through the kept descriptor
//	race P N          read P N times: "ok inside=I outside=O failed=F"
//	                  (outside counts reads that returned "s3cret")
//	mkdirs P N        make P/d0 ... P/d{N-1}: "ok made=M first=ERRNO"
//
// A failure is "err " and the errno's name (EROFS, EPERM, ...), as the
// guest's syscall package reports it.
package fsops

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var kept *os.File

// Do runs line and describes the outcome.
func Do(line string) string {
	f := strings.SplitN(line, " ", 3)
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	var err error
	switch f[0] {
	case "read":
		var b []byte
		if b, err = os.ReadFile(arg(1)); err == nil {
			return "ok " + string(b)
		}
	case "write":
		err = os.WriteFile(arg(1), []byte(arg(2)), 0o644)
	case "append":
		var w *os.File
		if w, err = os.OpenFile(arg(1), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			_, err = w.WriteString(arg(2))
			w.Close()
		}
	case "mkdir":
		err = os.Mkdir(arg(1), 0o755)
	case "rmdir":
		err = syscall.Rmdir(arg(1))
	case "unlink":
		err = syscall.Unlink(arg(1))
	case "rename":
		err = os.Rename(arg(1), arg(2))
	case "link":
		err = os.Link(arg(1), arg(2))
	case "symlink":
		err = os.Symlink(arg(1), arg(2))
	case "utimes":
		t := time.Unix(1, 0)
		err = os.Chtimes(arg(1), t, t)
	case "list":
		var ents []os.DirEntry
		if ents, err = os.ReadDir(arg(1)); err == nil {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			slices.Sort(names)
			return "ok " + strings.Join(names, ",")
		}
	case "keep":
		kept, err = os.OpenFile(arg(1), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	case "writekept":
		if kept == nil {
			return "err nothing kept"
		}
		_, err = kept.WriteString(arg(1))
	case "race":
		n, _ := strconv.Atoi(arg(2))
		var in, out, failed int
		for range n {
			b, err := os.ReadFile(arg(1))
			switch {
			case err != nil:
				failed++
			case string(b) == "s3cret":
				out++
			default:
				in++
			}
		}
		return fmt.Sprintf("ok inside=%d outside=%d failed=%d", in, out, failed)
	case "mkdirs":
		n, _ := strconv.Atoi(arg(2))
		made, first := 0, "none"
		for i := range n {
			if err := os.Mkdir(fmt.Sprintf("%s/d%d", arg(1), i), 0o755); err != nil {
				if first == "none" {
					first = Errno(err)
				}
				continue
			}
			made++
		}
		return fmt.Sprintf("ok made=%d first=%s", made, first)
	default:
		return "err unknown operation " + f[0]
	}
	if err != nil {
		return "err " + Errno(err)
	}
	return "ok"
}

// Errno names the errno inside err.
func Errno(err error) string {
	var e syscall.Errno
	if !errors.As(err, &e) {
		return err.Error()
	}
	for _, n := range []struct {
		e    syscall.Errno
		name string
	}{
		{syscall.EPERM, "EPERM"}, {syscall.EROFS, "EROFS"}, {syscall.ENOENT, "ENOENT"}, {syscall.EBADF, "EBADF"},
		{syscall.ELOOP, "ELOOP"}, {syscall.ENOSYS, "ENOSYS"}, {syscall.EISDIR, "EISDIR"}, {syscall.ENOTDIR, "ENOTDIR"},
		{syscall.ENOTEMPTY, "ENOTEMPTY"}, {syscall.EEXIST, "EEXIST"}, {syscall.EACCES, "EACCES"}, {syscall.EINVAL, "EINVAL"},
		{syscall.EXDEV, "EXDEV"}, {syscall.ENOTCAPABLE, "ENOTCAPABLE"},
		{syscall.ENOSPC, "ENOSPC"}, {syscall.EDQUOT, "EDQUOT"}, {syscall.EFBIG, "EFBIG"}, {syscall.EIO, "EIO"},
	} {
		if e == n.e {
			return n.name
		}
	}
	return fmt.Sprintf("errno %d", int(e))
}
