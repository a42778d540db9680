package knowledge

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Files is a bundle's content: base file name ("props.conf",
// "transforms.conf") → bytes.
type Files map[string][]byte

// MaxBundleBytes bounds the total size of a bundle's files: one NATS
// message carries them to a peer (the bus's default payload limit is 1 MiB);
// fsm.MaxBundleBytes is the same bound where the state checks it.
const MaxBundleBytes = 512 << 10

// The files of a configuration bundle.
const (
	PropsConf      = "props.conf"
	TransformsConf = "transforms.conf"
)

var (
	// ErrNoConf says a bundle directory holds neither props.conf nor
	// transforms.conf.
	ErrNoConf = errors.New("holds no props.conf or transforms.conf")
	// ErrBundleTooLarge says a bundle's files total more than MaxBundleBytes.
	ErrBundleTooLarge = fmt.Errorf("bundle over %d bytes", MaxBundleBytes)
)

// LoadDir reads DIR/props.conf and DIR/transforms.conf. Either may be absent;
// both absent is ErrNoConf, more than MaxBundleBytes together is
// ErrBundleTooLarge.
func LoadDir(dir string) (Files, error) {
	f := Files{}
	total := 0
	for _, name := range []string{PropsConf, TransformsConf} {
		b, err := readLimited(filepath.Join(dir, name), MaxBundleBytes-total)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		f[name] = b
		total += len(b)
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("%s %w", dir, ErrNoConf)
	}
	return f, nil
}

// readLimited reads path, refusing more than limit bytes without reading them.
func readLimited(path string, limit int) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("read %s: %w", path, ErrBundleTooLarge)
	}
	return b, nil
}

// size is the total size of the files.
func (f Files) size() int {
	n := 0
	for _, b := range f {
		n += len(b)
	}
	return n
}

// FilesFromText is a bundle's files as the wire and the state carry them
// (text by name).
func FilesFromText(text map[string]string) Files {
	f := make(Files, len(text))
	for name, t := range text {
		f[name] = []byte(t)
	}
	return f
}

// Text is the files as text by name (FilesFromText's inverse).
func (f Files) Text() map[string]string {
	out := make(map[string]string, len(f))
	for name, b := range f {
		out[name] = string(b)
	}
	return out
}

// Hash is "sha256:" + hex SHA-256 over the files in name order, each as
// (8-byte big-endian name length, name, 8-byte big-endian content length,
// content): equal content, equal hash; no two different bundles share the
// byte stream hashed.
func (f Files) Hash() string {
	names := make([]string, 0, len(f))
	for name := range f {
		names = append(names, name)
	}
	sort.Strings(names)
	h := sha256.New()
	var n [8]byte
	for _, name := range names {
		binary.BigEndian.PutUint64(n[:], uint64(len(name)))
		h.Write(n[:])
		io.WriteString(h, name)
		binary.BigEndian.PutUint64(n[:], uint64(len(f[name])))
		h.Write(n[:])
		h.Write(f[name])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
