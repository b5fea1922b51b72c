package sessions

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/wasmsnap"
	"github.com/moat-sandbox/moat/policy"
)

// BenchmarkImageRead measures what a resume reads of a session holding
// an 80 MB context image (a 50 MiB Python heap and the interpreter) from
// the directory store: version 1 (read whole, SHA-256) beside version 2
// (streamed, CRC-32C), the same bytes, on the same machine at once:
//
//	go test -run '^$' -bench ImageRead -benchtime 10x ./server/sessions/
func BenchmarkImageRead(b *testing.B) {
	data := make([]byte, 80<<20)
	_, _ = rand.Read(data)
	snap := &wasmsnap.Image{Pages: uint32(len(data)>>16) + 1, Runs: []wasmsnap.Run{{Off: 0, Data: data}}}
	ri, err := host.UnmarshalResidentImage(snap.Marshal())
	if err != nil {
		b.Fatal(err)
	}
	ws := b.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "note.txt"), []byte("kept"), 0o600); err != nil {
		b.Fatal(err)
	}
	m := &Manager{cfg: Config{DiskQuotaBytes: 1 << 20, MaxFiles: 100}}
	s := &Session{m: m, id: "s1", owner: policy.Principal{User: "u", Org: "o"}, dir: ws}
	st := &sessionState{contexts: map[string]*pendingContext{"python": {info: ContextInfo{Name: "python", Language: "python"}, img: ri}}}
	dir := b.TempDir()
	v2 := filepath.Join(dir, "v2.img")
	f, err := os.Create(v2)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.writeImage(f, st, 1<<30); err != nil {
		b.Fatal(err)
	}
	f.Close()
	// The same session as version 1 wrote it.
	var tarBuf bytes.Buffer
	if err := tarTree(&tarBuf, ws, 1<<20, 100); err != nil {
		b.Fatal(err)
	}
	cimg, _ := ri.MarshalBinary()
	hb, _ := json.Marshal(imageHeader{ID: "s1", User: "u", Org: "o", Contexts: []imageContext{{Info: st.contexts["python"].info, Bytes: int64(len(cimg))}}, Tar: int64(tarBuf.Len())})
	out := append(append([]byte{}, imageMagicV1...), binary.AppendUvarint(nil, uint64(len(hb)))...)
	out = append(append(append(out, hb...), cimg...), tarBuf.Bytes()...)
	sum := sha256.Sum256(out)
	v1 := filepath.Join(dir, "v1.img")
	if err := os.WriteFile(v1, append(out, sum[:]...), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, v := range []struct{ name, path string }{{"v1-whole-sha256", v1}, {"v2-stream-crc32c", v2}} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				f, err := os.Open(v.path)
				if err != nil {
					b.Fatal(err)
				}
				ir, err := openImage(f, 1<<30)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ir.contexts(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				out := filepath.Join(b.TempDir(), "ws")
				os.Mkdir(out, 0o700)
				b.StartTimer()
				if err := ir.workspace(out, 1<<20, 100); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}

// BenchmarkImageWrite measures a pause's image of the same session
// written to the directory store: streamed (version 2) beside built in
// memory first (version 1's way: the joined bytes, then the file).
func BenchmarkImageWrite(b *testing.B) {
	data := make([]byte, 80<<20)
	_, _ = rand.Read(data)
	snap := &wasmsnap.Image{Pages: uint32(len(data)>>16) + 1, Runs: []wasmsnap.Run{{Off: 0, Data: data}}}
	ri, err := host.UnmarshalResidentImage(snap.Marshal())
	if err != nil {
		b.Fatal(err)
	}
	m := &Manager{cfg: Config{DiskQuotaBytes: 1 << 20, MaxFiles: 100}}
	s := &Session{m: m, id: "s1", owner: policy.Principal{User: "u", Org: "o"}, dir: b.TempDir()}
	st := &sessionState{contexts: map[string]*pendingContext{"python": {info: ContextInfo{Name: "python", Language: "python"}, img: ri}}}
	images := DirImages(b.TempDir())
	b.Run("v2-stream", func(b *testing.B) {
		for range b.N {
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- images.PutImage(b.Context(), "o", "s1", pr) }()
			_, err := s.writeImage(pw, st, 1<<30)
			pw.CloseWithError(err)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("v1-in-memory", func(b *testing.B) {
		for range b.N {
			cimg, _ := ri.MarshalBinary()
			var tarBuf bytes.Buffer
			_ = tarTree(&tarBuf, s.dir, 1<<20, 100)
			out := append(append([]byte{}, imageMagicV1...), cimg...)
			out = append(out, tarBuf.Bytes()...)
			sum := sha256.Sum256(out)
			if err := images.PutImage(b.Context(), "o", "s1", bytes.NewReader(append(out, sum[:]...))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
