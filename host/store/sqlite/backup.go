package sqlite

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"golang.org/x/sys/unix"
)

// A backup of a SQLite store is a gzip-compressed tar archive holding
//
//	moat.db                       a consistent copy of the database (VACUUM INTO)
//	media/<org hash>/<xx>/<id>    the bytes of every media item that copy lists
//	MANIFEST.json                 last: the format, the schema version, and each
//	                              file's size and SHA-256
//
// The media files are those the copy of the database lists, so the two
// agree however many writes went on meanwhile. Restore trusts nothing in
// an archive: every name must be one of those shapes (so none can reach
// outside the data directory), every entry a regular file, the manifest
// last and matching every file, and the database whole (integrity_check)
// and of a schema this moat can use; it unpacks into a directory of its
// own inside the target and moves the result into place only when all of
// that holds, so a refused archive writes nothing.

// BackupFormat names the archive's format in its manifest.
const BackupFormat = "moat-backup/1"

// manifestName is the archive's last entry.
const manifestName = "MANIFEST.json"

// maxManifest bounds the manifest Restore reads into memory.
const maxManifest = 64 << 20

var mediaEntry = regexp.MustCompile(`^media/[0-9a-f]{64}/[0-9a-f]{2}/[0-9a-f]{64}$`)

// BackupManifest is MANIFEST.json.
type BackupManifest struct {
	Format  string        `json:"format"`
	Created time.Time     `json:"created"`
	Schema  int           `json:"schema_version"`
	Files   []BackupEntry `json:"files"`
}

// BackupEntry is one file of a backup.
type BackupEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ErrInUse is a refusal to restore over a store a moat process has open.
var ErrInUse = errors.New("a moat process has the store open")

// Backup writes a backup of the store in dir to w (see above) and returns
// its manifest. The store may be in use: the database is copied from one
// snapshot, and the media files are those that snapshot lists.
func Backup(ctx context.Context, dir string, w io.Writer) (BackupManifest, error) {
	m := BackupManifest{Format: BackupFormat, Created: time.Now().UTC()}
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err != nil {
		return m, fmt.Errorf("backup: no store in %s (%s: %w)", dir, FileName, err)
	}
	db, err := openPool(path, false)
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	defer db.Close()
	snap := filepath.Join(dir, ".backup-"+randHex()+".db")
	if err := VacuumInto(ctx, db, snap); err != nil {
		return m, fmt.Errorf("backup: copy the database: %w", err)
	}
	defer os.Remove(snap)

	// What the copy lists, read from the copy.
	s, err := sql.Open("sqlite", dsn(snap, nil))
	if err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	defer s.Close()
	if err := s.QueryRowContext(ctx, "PRAGMA user_version").Scan(&m.Schema); err != nil {
		return m, fmt.Errorf("backup: read the copy's schema version: %w", err)
	}
	type item struct {
		org, id string
		size    int64
	}
	var items []item
	rows, err := s.QueryContext(ctx, `SELECT org, id, size FROM media_items ORDER BY org, id`)
	if err != nil {
		return m, fmt.Errorf("backup: list media: %w", err)
	}
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.org, &it.id, &it.size); err != nil {
			rows.Close()
			return m, err
		}
		items = append(items, it)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return m, err
	}
	s.Close()

	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	add := func(name, src string, size int64) error {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if size >= 0 && fi.Size() != size {
			return fmt.Errorf("%s holds %d bytes, and the database says %d", src, fi.Size(), size)
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: fi.Size(), ModTime: m.Created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(f, fi.Size())); err != nil {
			return err
		}
		m.Files = append(m.Files, BackupEntry{Name: name, Size: fi.Size(), SHA256: hex.EncodeToString(h.Sum(nil))})
		return nil
	}
	if err := add(FileName, snap, -1); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	d := &DB{path: path}
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		p, err := d.mediaPath(it.org, it.id)
		if err != nil {
			return m, fmt.Errorf("backup: %w", err)
		}
		rel, _ := filepath.Rel(dir, p)
		if err := add(filepath.ToSlash(rel), p, it.size); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return m, fmt.Errorf("backup: media item %s was deleted while the backup ran; run moat backup again: %w", it.id, err)
			}
			return m, fmt.Errorf("backup: media item %s: %w", it.id, err)
		}
	}
	man, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: manifestName, Mode: 0o600, Size: int64(len(man)), ModTime: m.Created, Typeflag: tar.TypeReg}); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if _, err := tw.Write(man); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := tw.Close(); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	if err := zw.Close(); err != nil {
		return m, fmt.Errorf("backup: %w", err)
	}
	return m, nil
}

// RestoreOptions are how Restore treats the target.
type RestoreOptions struct {
	// Force moves a store the target holds already aside, to
	// dir/pre-restore-<time>/, rather than refusing.
	Force bool
	// MaxBytes bounds what the archive may unpack to (0: 1 TiB).
	MaxBytes int64
}

// RestoreReport is what Restore put in place.
type RestoreReport struct {
	Manifest BackupManifest
	Aside    string // where the store the target held went ("" when none)
}

// Restore unpacks the backup r into the data directory dir, after
// checking all of it (see above). It refuses, writing nothing, when a
// moat process has dir's store open (ErrInUse), when dir holds a store
// and not o.Force, and when anything of the archive is wrong.
func Restore(ctx context.Context, r io.Reader, dir string, o RestoreOptions) (rep RestoreReport, err error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 40
	}
	created := false
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return rep, fmt.Errorf("restore: %w", err)
		}
		created = true
	}
	defer func() {
		if err != nil && created {
			os.RemoveAll(dir)
		}
	}()
	target := filepath.Join(dir, FileName)
	var lock *os.File
	if f, err := os.OpenFile(target, os.O_RDWR, 0); err == nil {
		lock = f
		defer lock.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return rep, fmt.Errorf("restore: %w: %s is open (is moat serve running on it?); stop every moat using %s, then restore", ErrInUse, target, dir)
		}
		if !o.Force {
			return rep, fmt.Errorf("restore: %s holds a store already; restore into an empty directory, or pass --force to move it aside first", dir)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("restore: %w", err)
	}

	stage, err := os.MkdirTemp(dir, ".restore-")
	if err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(stage)
	got, man, err := unpack(r, stage, o.MaxBytes)
	if err != nil {
		return rep, fmt.Errorf("restore: the archive is refused, nothing was written: %w", err)
	}
	if err := verify(ctx, stage, got, man); err != nil {
		return rep, fmt.Errorf("restore: the archive is refused, nothing was written: %w", err)
	}
	rep.Manifest = man

	if lock != nil {
		rep.Aside = filepath.Join(dir, "pre-restore-"+time.Now().UTC().Format("20060102T150405Z"))
		if err := os.Mkdir(rep.Aside, 0o700); err != nil {
			return rep, fmt.Errorf("restore: %w", err)
		}
		for _, n := range []string{FileName, FileName + "-wal", FileName + "-shm", "media"} {
			if err := os.Rename(filepath.Join(dir, n), filepath.Join(rep.Aside, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return rep, fmt.Errorf("restore: move %s aside to %s: %w", n, rep.Aside, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(stage, "media")); err == nil {
		if err := os.Rename(filepath.Join(stage, "media"), filepath.Join(dir, "media")); err != nil {
			return rep, fmt.Errorf("restore: %w", err)
		}
	}
	if err := os.Rename(filepath.Join(stage, FileName), target); err != nil {
		return rep, fmt.Errorf("restore: %w", err)
	}
	return rep, nil
}

// unpack reads the archive into stage, refusing any name but the
// archive's shapes, any entry but a regular file, a duplicate, anything
// after the manifest, and more than maxBytes in all. It returns the
// files with their sizes and hashes, and the manifest.
func unpack(r io.Reader, stage string, maxBytes int64) (map[string]BackupEntry, BackupManifest, error) {
	var man BackupManifest
	got := map[string]BackupEntry{}
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, man, fmt.Errorf("not a gzip-compressed backup: %w", err)
	}
	tr := tar.NewReader(zr)
	var total int64
	sawManifest := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, man, fmt.Errorf("the archive is damaged or truncated: %w", err)
		}
		if sawManifest {
			return nil, man, fmt.Errorf("entry %q follows %s, which must be last", h.Name, manifestName)
		}
		if h.Typeflag != tar.TypeReg {
			return nil, man, fmt.Errorf("entry %q is not a regular file (type %q); a backup holds only files", h.Name, h.Typeflag)
		}
		if h.Name != FileName && h.Name != manifestName && !mediaEntry.MatchString(h.Name) {
			return nil, man, fmt.Errorf("entry %q is not a file a backup holds (moat.db, media/<org>/<xx>/<id>, %s)", h.Name, manifestName)
		}
		if _, dup := got[h.Name]; dup {
			return nil, man, fmt.Errorf("entry %q is there twice", h.Name)
		}
		if h.Size < 0 || total+h.Size > maxBytes {
			return nil, man, fmt.Errorf("the archive unpacks to more than %d bytes", maxBytes)
		}
		total += h.Size
		if h.Name == manifestName {
			if h.Size > maxManifest {
				return nil, man, fmt.Errorf("%s is %d bytes, more than a backup's", manifestName, h.Size)
			}
			b, err := io.ReadAll(io.LimitReader(tr, maxManifest))
			if err != nil {
				return nil, man, fmt.Errorf("the archive is damaged or truncated: %w", err)
			}
			if err := json.Unmarshal(b, &man); err != nil {
				return nil, man, fmt.Errorf("%s does not parse: %w", manifestName, err)
			}
			sawManifest = true
			continue
		}
		p := filepath.Join(stage, filepath.FromSlash(h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, man, err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, man, err
		}
		hs := sha256.New()
		n, err := io.Copy(io.MultiWriter(f, hs), tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, man, fmt.Errorf("the archive is damaged or truncated at %q: %w", h.Name, err)
		}
		got[h.Name] = BackupEntry{Name: h.Name, Size: n, SHA256: hex.EncodeToString(hs.Sum(nil))}
	}
	if !sawManifest {
		return nil, man, fmt.Errorf("the archive has no %s: it is truncated, or not a moat backup", manifestName)
	}
	return got, man, nil
}

// verify holds what was unpacked to the manifest, and the database to
// what a store is: whole, of a schema this moat can open, and listing
// exactly the media files the archive holds, each of its size.
func verify(ctx context.Context, stage string, got map[string]BackupEntry, man BackupManifest) error {
	if man.Format != BackupFormat {
		return fmt.Errorf("format %q is not %s", man.Format, BackupFormat)
	}
	listed := map[string]bool{}
	for _, e := range man.Files {
		g, ok := got[e.Name]
		if !ok {
			return fmt.Errorf("%s lists %q, which the archive lacks", manifestName, e.Name)
		}
		if listed[e.Name] {
			return fmt.Errorf("%s lists %q twice", manifestName, e.Name)
		}
		listed[e.Name] = true
		if g.Size != e.Size || g.SHA256 != e.SHA256 {
			return fmt.Errorf("%q does not match %s (size %d, sha256 %s; listed %d, %s): the archive was changed or damaged", e.Name, manifestName, g.Size, g.SHA256, e.Size, e.SHA256)
		}
	}
	for name := range got {
		if !listed[name] {
			return fmt.Errorf("%q is not listed in %s", name, manifestName)
		}
	}
	if _, ok := got[FileName]; !ok {
		return fmt.Errorf("the archive holds no %s", FileName)
	}
	db, err := sql.Open("sqlite", dsn(filepath.Join(stage, FileName), nil))
	if err != nil {
		return err
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		return fmt.Errorf("%s is not a whole SQLite database (integrity_check: %q %v)", FileName, check, err)
	}
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	if v != man.Schema || v < 1 {
		return fmt.Errorf("%s is at schema version %d, and %s says %d", FileName, v, manifestName, man.Schema)
	}
	if v > len(migrations) {
		return fmt.Errorf("%s is at schema version %d, newer than this moat knows (%d): restore it with the moat that made it", FileName, v, len(migrations))
	}
	rows, err := db.QueryContext(ctx, `SELECT org, id, size FROM media_items`)
	if err != nil {
		return fmt.Errorf("%s is not a moat store: %w", FileName, err)
	}
	defer rows.Close()
	d := &DB{path: filepath.Join(stage, FileName)}
	want := 0
	for rows.Next() {
		var org, id string
		var size int64
		if err := rows.Scan(&org, &id, &size); err != nil {
			return err
		}
		p, err := d.mediaPath(org, id)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(stage, p)
		g, ok := got[filepath.ToSlash(rel)]
		if !ok || g.Size != size {
			return fmt.Errorf("media item %s of the database is missing from the archive, or of another size", id)
		}
		want++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if have := len(got) - 1; have != want {
		return fmt.Errorf("the archive holds %d media files, and the database lists %d", have, want)
	}
	return nil
}

// sweepBackupTemp removes what a backup or restore that died left in dir:
// a snapshot (.backup-*.db) or a staging directory (.restore-*), once
// older than mediaTempGrace (a younger one may be in use).
func sweepBackupTemp(dir string) {
	for _, pat := range []string{".backup-*.db", ".restore-*"} {
		found, _ := filepath.Glob(filepath.Join(dir, pat))
		for _, p := range found {
			if fi, err := os.Lstat(p); err == nil && time.Since(fi.ModTime()) > mediaTempGrace {
				os.RemoveAll(p)
			}
		}
	}
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
