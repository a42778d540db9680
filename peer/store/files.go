package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// File names inside a bucket folder.
const (
	copyFile    = "copy.json"  // written before the first block: the copy exists
	journalFile = "journal.qj" // the blocks
	indexFile   = "index.qi"   // searchable copies only
	columnsFile = "columns.qc" // searchable copies only, beside the index
	metaFile    = "meta.json"  // written last when the bucket is warm
	tmpSuffix   = ".tmp"
)

// formatVersion is the version of copy.json and meta.json this code writes
// and reads; the journal frame and the index file carry their own version
// bytes (QJB\x01, QIDX\x01).
const formatVersion = 1

// ErrUnsupported marks a copy written in a format version this peer does not
// read (a newer peer wrote it): it is kept and listed, not served.
var ErrUnsupported = errors.New("unsupported format version")

// copyInfo is copy.json, format version 1.
type copyInfo struct {
	Version    int    `json:"version"`
	ID         string `json:"id"`
	Index      string `json:"index"`
	LocalID    uint64 `json:"local_id"`
	Searchable bool   `json:"searchable"`
	// Quarantine: the index's quarantine bucket (placement.go). Optional,
	// so version 1 still reads and writes it.
	Quarantine bool `json:"quarantine,omitempty"`
	// AckCopies: on an origin's copy, how many copies (its own included)
	// the ack rule required of a block of this bucket before any of its
	// events was acknowledged (replica.go AckRule); 1 on a standalone
	// peer. Optional: 0 (a replica, or a copy written before it existed)
	// means not recorded.
	AckCopies int `json:"ack_copies,omitempty"`
}

// metaInfo is meta.json, format version 1: a warm bucket's metadata. Its
// presence is what makes a bucket warm; everything it names was durable
// before it was written.
type metaInfo struct {
	Version      int    `json:"version"`
	ID           string `json:"id"`
	Index        string `json:"index"`
	LocalID      uint64 `json:"local_id"`
	Searchable   bool   `json:"searchable"`
	Events       uint32 `json:"events"`
	Blocks       int    `json:"blocks"`
	JournalBytes int64  `json:"journal_bytes"`
	IndexBytes   int64  `json:"index_bytes"`
	ColumnBytes  int64  `json:"column_bytes,omitempty"`
	RawBytes     int64  `json:"raw_bytes"`
	Earliest     int64  `json:"earliest"`
	Latest       int64  `json:"latest"`
	ContentHash  string `json:"content_hash"`
	Quarantine   bool   `json:"quarantine,omitempty"`
	// PendingTruncate, when >= 0, is a truncation to that many blocks that
	// was decided but may not be finished; open completes it.
	PendingTruncate int `json:"pending_truncate"`
}

// DirPerm and FilePerm are the modes of a peer's folders and files: the
// owner reads and writes, its group reads (backups, log shippers run as a
// group), others nothing — a peer's files hold every event (review L9;
// managers keep 0750/0600).
const (
	DirPerm  os.FileMode = 0o750
	FilePerm os.FileMode = 0o640
)

// writeFileAtomic writes data to dir/name so that after a crash the file is
// either absent/old or whole: temp file, fsync, rename, directory fsync.
func writeFileAtomic(dir, name string, data []byte, crashName string) error {
	tmp := filepath.Join(dir, name+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, FilePerm)
	if err != nil {
		return err
	}
	half := len(data) / 2
	if _, err := f.Write(data[:half]); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	crashPoint(crashName + "-write")
	if _, err := f.Write(data[half:]); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	crashPoint(crashName + "-rename")
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func writeJSONAtomic(dir, name string, v any, crashName string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, name, append(b, '\n'), crashName)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// Crash points: a test sets QUARRY_CRASHPOINT=name:N (or name:N,name2:M) in
// a child peer's environment, and the peer SIGKILLs itself the Nth time it
// reaches that point. Points: seal (a block about to be queued for the
// disk), block-write (half a frame written), fsync
// (blocks written, before fsync), roll (journal closed, before the index),
// index-write / index-rename (half an index temp file; before its rename),
// columns-write / columns-rename (the same for the column file),
// meta-write / meta-rename, copy-write / copy-rename. Without the variable
// a point costs one atomic load.
var (
	crashArmed atomic.Bool
	crashSpecs map[string]*crashSpec
)

type crashSpec struct {
	at   int64
	hits atomic.Int64
}

func init() {
	v := os.Getenv("QUARRY_CRASHPOINT")
	if v == "" {
		return
	}
	crashSpecs = map[string]*crashSpec{}
	for _, part := range strings.Split(v, ",") {
		name, n, _ := strings.Cut(part, ":")
		at, err := strconv.ParseInt(n, 10, 64)
		if err != nil || at < 1 {
			at = 1
		}
		crashSpecs[name] = &crashSpec{at: at}
	}
	crashArmed.Store(true)
}

func crashPoint(name string) {
	if !crashArmed.Load() {
		return
	}
	if c := crashSpecs[name]; c != nil && c.hits.Add(1) == c.at {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
