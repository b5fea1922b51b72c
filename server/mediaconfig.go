package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/host/media"
	"github.com/moat-sandbox/moat/policy"
)

// MediaConfig is the media: section of moat-server.yaml: the media
// family's own configuration (media.FamilyConfig: quota_bytes, decode_bytes),
// inline, beside the keys of the server's media routes (media.go).
type MediaConfig struct {
	// The family's keys. The server bounds them further: quota_bytes
	// from 1MiB to 1TiB (default 1GiB), decode_bytes from 512MiB (the
	// largest image the host decodes) to 64GiB (default 1GiB).
	media.FamilyConfig `yaml:",inline"`
	// URLTTL is the longest a signed URL (POST /v1/media/{id}/url) lasts,
	// and how long one lasts unless the request asks for less. Default
	// 10m; from 10s to 24h. A URL claiming to last longer than this is
	// refused, so lowering it shortens the URLs already given out.
	URLTTL policy.Duration `yaml:"url_ttl"`
	// URLKeyFile names a file holding the key that signs media URLs (its
	// first line, at least 32 characters; openssl rand -hex 32 makes
	// one). Replicas must share it: a URL signed by one is served by
	// any. $MOAT_MEDIA_KEY (URLKey) wins over it. Without either, the
	// server keeps a key of its own in data_dir/media-url.key, made at
	// first start, which is enough for one server; replicas on one
	// database are warned at start that their URLs work only where they
	// were signed.
	URLKeyFile string `yaml:"url_key_file"`
	// URLKey is the key itself, for programs embedding the server; moat
	// serve sets it from $MOAT_MEDIA_KEY.
	URLKey string `yaml:"-"`
}

// EnvMediaKey names the environment variable moat serve reads the media
// URL key from (MediaConfig.URLKey; it wins over url_key_file).
const EnvMediaKey = "MOAT_MEDIA_KEY"

// MinMediaKeyBytes is the least a media URL key may hold.
const MinMediaKeyBytes = 32

// ValidateMediaKey checks a media URL key given outside the config file
// (EnvMediaKey). Its error never holds the key.
func ValidateMediaKey(key string) error {
	if len(key) < MinMediaKeyBytes {
		return fmt.Errorf("the media URL key is %d characters; use at least %d (openssl rand -hex 32 makes one)", len(key), MinMediaKeyBytes)
	}
	return nil
}

func (m *MediaConfig) fillDefaults() {
	if m.QuotaBytes == 0 {
		m.QuotaBytes = media.DefaultQuota
	}
	if m.DecodeBytes == 0 {
		m.DecodeBytes = media.DefaultDecodeBytes
	}
	if m.URLTTL == 0 {
		m.URLTTL = policy.Duration(10 * time.Minute)
	}
}

func (m *MediaConfig) validate(fail failFunc) error {
	if m.QuotaBytes < 1<<20 || m.QuotaBytes > 1<<40 {
		return fail("media.quota_bytes", "%s is outside 1 MiB to 1 TiB; leave it out for the default %s", m.QuotaBytes, policy.ByteSize(media.DefaultQuota))
	}
	if m.DecodeBytes < 512<<20 || m.DecodeBytes > 64<<30 {
		return fail("media.decode_bytes", "%s is outside 512 MiB (what decoding the largest image the host keeps may take) to 64 GiB; leave it out for the default %s",
			m.DecodeBytes, policy.ByteSize(media.DefaultDecodeBytes))
	}
	if d := time.Duration(m.URLTTL); d < 10*time.Second || d > 24*time.Hour {
		return fail("media.url_ttl", "%s is outside 10s to 24h; leave it out for the default 10m", d)
	}
	if m.URLKeyFile != "" && m.URLKey == "" {
		b, err := os.ReadFile(m.URLKeyFile)
		if err != nil {
			return fail("media.url_key_file", "%v", err)
		}
		line, _, _ := strings.Cut(string(b), "\n")
		key := strings.TrimSpace(line)
		if len(key) < MinMediaKeyBytes {
			return fail("media.url_key_file", "the key in %s is %d characters; use at least %d (openssl rand -hex 32 makes one)", m.URLKeyFile, len(key), MinMediaKeyBytes)
		}
		m.URLKey = key
	}
	if m.URLKey != "" {
		if err := ValidateMediaKey(m.URLKey); err != nil {
			return fail("media.url_key_file", "%v ($%s)", err, EnvMediaKey)
		}
	}
	return nil
}

// mediaKeyFile is the server's own media URL key, in the data directory,
// when none is configured.
const mediaKeyFile = "media-url.key"

// mediaURLKey returns the key that signs media URLs: the configured one,
// or the one in dataDir/media-url.key, made (32 random bytes, hex, mode
// 0600) when there is none. Two servers starting at once on one data
// directory agree on one key.
func mediaURLKey(cfg MediaConfig, dataDir string) (key []byte, own bool, err error) {
	if cfg.URLKey != "" {
		return []byte(cfg.URLKey), false, nil
	}
	path := filepath.Join(dataDir, mediaKeyFile)
	read := func() ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		if k := strings.TrimSpace(line); len(k) >= MinMediaKeyBytes {
			return []byte(k), nil
		}
		return nil, fmt.Errorf("%s holds %d characters, fewer than %d; remove it and a new key is made", path, len(strings.TrimSpace(line)), MinMediaKeyBytes)
	}
	if k, err := read(); err == nil {
		return k, true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("media URL key: %w", err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, false, fmt.Errorf("media URL key: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, false, fmt.Errorf("media URL key: %w", err)
	}
	// Written whole to a file of its own, then linked into place: link
	// fails when the name exists, so a server starting beside this one
	// either wins or reads the winner's whole key, never half of it.
	f, err := os.CreateTemp(dataDir, mediaKeyFile+".*")
	if err != nil {
		return nil, false, fmt.Errorf("media URL key: %w", err)
	}
	defer os.Remove(f.Name())
	k := hex.EncodeToString(raw[:])
	_, err = f.WriteString(k + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, fmt.Errorf("media URL key: write %s: %w", f.Name(), err)
	}
	if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
		k, err := read()
		if err != nil {
			return nil, false, fmt.Errorf("media URL key: %w", err)
		}
		return k, true, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("media URL key: %w", err)
	}
	return []byte(k), true, nil
}
