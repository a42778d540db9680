package store

import (
	"container/list"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// The file cache bounds the descriptors a peer holds for reading its
// copies (journals, index and column files): a peer with 100,000 warm
// copies runs under the default `ulimit -n` of 1024.
//
//   - A copy's reader holds a *cachedFile, not an *os.File: a path whose
//     descriptor is opened on demand and closed when the cache evicts it.
//   - A descriptor is pinned (reference-counted) only for the duration of
//     one read (ReadAt, Stat), so a search never has a file closed under a
//     read, and the descriptors in use at once are bounded by the reads in
//     flight, not by the copies a search visits.
//   - At most Options.MaxOpenFiles descriptors are kept; past the cap the
//     least recently used idle one is closed first. Pinned descriptors are
//     never evicted: when every cached descriptor is pinned the cache opens
//     one more rather than stall a read, and closes the surplus as soon as
//     the read lets go.
//   - A descriptor reopened after an eviction must name the same file
//     (device and inode) as the first: a file replaced under a reader
//     (an index rebuilt beside it) is an error for that read, never other
//     bytes read at the old offsets.
//   - Running out of descriptors (EMFILE, ENFILE) closes every idle cached
//     descriptor and retries once; if that does not help, the read fails
//     with ErrNoFileDescriptors — an error for the request that read,
//     never a failed store.

// ErrNoFileDescriptors is returned by a read or a write that needed a file
// descriptor when the process had none left (EMFILE or ENFILE) even after
// the file cache closed its idle ones. It fails that request only; the
// store stays healthy and a later request succeeds once descriptors are
// free.
var ErrNoFileDescriptors = errors.New("out of file descriptors")

// isFDError reports whether err is the process or the system running out
// of file descriptors.
func isFDError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, ErrNoFileDescriptors)
}

// DefaultMaxOpenFiles is the file cache's cap when Options.MaxOpenFiles is
// 0: half the soft RLIMIT_NOFILE (the rest is left for sockets, hot
// journals and temporary files), at least 16 and at most 4,096 — 512 under
// the usual `ulimit -n 1024`.
func DefaultMaxOpenFiles() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 512
	}
	return int(min(max(rl.Cur/2, 16), 4096))
}

// FileStats are the file cache's counters (metrics).
type FileStats struct {
	Open      atomic.Int64 // descriptors the cache holds now
	Peak      atomic.Int64 // the most it has held at once
	Opens     atomic.Int64 // descriptors opened
	Evictions atomic.Int64 // idle descriptors closed to stay under the cap
	Exhausted atomic.Int64 // reads refused with ErrNoFileDescriptors
}

// fileCache is an LRU of open read-only descriptors.
type fileCache struct {
	limit int
	stats *FileStats

	mu   sync.Mutex
	idle list.List // *cachedFile with a descriptor and no reader, most recent first
	open int       // descriptors held (idle and pinned)
}

func newFileCache(limit int, stats *FileStats) *fileCache {
	if stats == nil {
		stats = &FileStats{}
	}
	return &fileCache{limit: max(limit, 1), stats: stats}
}

// cachedFile is one file read through the cache. With a nil cache it is a
// plain file: opened on first use and kept until Close (tests, tools).
type cachedFile struct {
	c    *fileCache
	path string

	// guarded by c.mu (by mu when c is nil)
	mu       sync.Mutex
	f        *os.File
	refs     int
	elem     *list.Element // in c.idle while f != nil && refs == 0
	closed   bool
	known    bool // dev, ino hold the identity of the file first opened
	dev, ino uint64
}

// handle returns a cached file for path; nothing is opened yet.
func (c *fileCache) handle(path string) *cachedFile { return &cachedFile{c: c, path: path} }

func (h *cachedFile) lock() {
	if h.c != nil {
		h.c.mu.Lock()
	} else {
		h.mu.Lock()
	}
}

func (h *cachedFile) unlock() {
	if h.c != nil {
		h.c.mu.Unlock()
	} else {
		h.mu.Unlock()
	}
}

// acquire pins the file's descriptor, opening it when needed.
func (h *cachedFile) acquire() (*os.File, error) {
	h.lock()
	defer h.unlock()
	if h.closed {
		return nil, fmt.Errorf("read %s: %w", h.path, os.ErrClosed)
	}
	if h.f == nil {
		if err := h.openLocked(); err != nil {
			return nil, err
		}
	}
	if h.elem != nil {
		h.c.idle.Remove(h.elem)
		h.elem = nil
	}
	h.refs++
	return h.f, nil
}

// openLocked opens the descriptor, making room under the cap first.
func (h *cachedFile) openLocked() error {
	c := h.c
	if c != nil {
		for c.open >= c.limit && c.evictOneLocked() {
		}
	}
	f, err := os.Open(h.path)
	if err != nil && c != nil && isFDError(err) {
		// Out of descriptors: give back every idle one, try once more.
		for c.evictOneLocked() {
		}
		f, err = os.Open(h.path)
	}
	if err != nil {
		if isFDError(err) {
			if c != nil {
				c.stats.Exhausted.Add(1)
			}
			return fmt.Errorf("%w: %w", ErrNoFileDescriptors, err)
		}
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return fmt.Errorf("stat %s: %w", h.path, err)
	}
	if !h.known {
		h.known, h.dev, h.ino = true, uint64(st.Dev), st.Ino
	} else if uint64(st.Dev) != h.dev || st.Ino != h.ino {
		f.Close()
		return fmt.Errorf("reopen %s: the file was replaced since it was first read (the copy changed under this read)", h.path)
	}
	h.f = f
	if c != nil {
		c.open++
		c.stats.Open.Store(int64(c.open))
		c.stats.Opens.Add(1)
		if int64(c.open) > c.stats.Peak.Load() {
			c.stats.Peak.Store(int64(c.open)) // under c.mu: no lost update
		}
	}
	return nil
}

// evictOneLocked closes the least recently used idle descriptor; false
// when none is idle.
func (c *fileCache) evictOneLocked() bool {
	e := c.idle.Back()
	if e == nil {
		return false
	}
	v := e.Value.(*cachedFile)
	c.idle.Remove(e)
	v.elem = nil
	v.f.Close()
	v.f = nil
	c.open--
	c.stats.Open.Store(int64(c.open))
	c.stats.Evictions.Add(1)
	return true
}

// release unpins the descriptor acquire returned.
func (h *cachedFile) release() {
	h.lock()
	defer h.unlock()
	h.refs--
	if h.refs > 0 || h.f == nil {
		return
	}
	c := h.c
	if h.closed {
		h.f.Close()
		h.f = nil
		if c != nil {
			c.open--
			c.stats.Open.Store(int64(c.open))
		}
		return
	}
	if c == nil {
		return // a plain file keeps its descriptor until Close
	}
	h.elem = c.idle.PushFront(h)
	for c.open > c.limit && c.evictOneLocked() {
	}
}

// ReadAt reads through a pinned descriptor (io.ReaderAt).
func (h *cachedFile) ReadAt(p []byte, off int64) (int, error) {
	f, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.release()
	return f.ReadAt(p, off)
}

// Stat is os.File.Stat on a pinned descriptor.
func (h *cachedFile) Stat() (os.FileInfo, error) {
	f, err := h.acquire()
	if err != nil {
		return nil, err
	}
	defer h.release()
	return f.Stat()
}

// dropIdle closes the descriptor if no read holds it; the file stays
// readable (the next read reopens it). Recovery uses it so that opening
// 100,000 copies does not leave the last ones' descriptors cached.
func (h *cachedFile) dropIdle() {
	if h == nil {
		return
	}
	h.lock()
	defer h.unlock()
	if h.f == nil || h.refs > 0 || h.c == nil {
		return
	}
	h.c.idle.Remove(h.elem)
	h.elem = nil
	h.f.Close()
	h.f = nil
	h.c.open--
	h.c.stats.Open.Store(int64(h.c.open))
}

// Close closes the file for good: later reads fail. A descriptor pinned by
// a read is closed when that read lets go.
func (h *cachedFile) Close() error {
	if h == nil {
		return nil
	}
	h.lock()
	defer h.unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	if h.f == nil || h.refs > 0 {
		return nil
	}
	if h.elem != nil {
		h.c.idle.Remove(h.elem)
		h.elem = nil
	}
	err := h.f.Close()
	h.f = nil
	if h.c != nil {
		h.c.open--
		h.c.stats.Open.Store(int64(h.c.open))
	}
	return err
}

// shed closes every idle descriptor (before retrying an open that found
// the process out of descriptors).
func (c *fileCache) shed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.evictOneLocked() {
	}
}

// dropFiles closes the idle descriptors of a copy's files (they reopen on
// the next read).
func (b *Bucket) dropFiles() {
	b.mu.RLock()
	defer b.mu.RUnlock()
	b.rd.dropIdle()
	if b.widx != nil {
		b.widx.f.dropIdle()
		if b.widx.cols != nil {
			b.widx.cols.f.dropIdle()
		}
	}
}
