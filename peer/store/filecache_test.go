package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/query"
)

// warmBuckets writes n warm buckets of per events each into a new store.
func warmBuckets(t *testing.T, opts Options, n, per int) {
	t.Helper()
	s := mustOpen(t, opts)
	for i := 0; i < n; i++ {
		waitDurable(t, appendN(t, s, "main", i*per, per))
		s.RollAll()
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFileCacheBoundsOpenFiles: 40 warm copies (120 files) searched by 6
// concurrent searches through a cache of 4 descriptors: every count is
// exact, the cache never holds more than its cap plus the reads in flight,
// and nothing stays open beyond the cap once the searches are done.
// Recovery gives back the descriptors it used.
func TestFileCacheBoundsOpenFiles(t *testing.T) {
	opts := Options{Dir: t.TempDir(), GUID: testGUID, Searchable: true, MaxOpenFiles: 4}
	const n, per = 40, 5
	warmBuckets(t, opts, n, per)
	s := mustOpen(t, opts)
	defer s.Close()
	if got := s.Stats.Files.Open.Load(); got != 0 {
		t.Fatalf("%d descriptors cached after recovery, want 0", got)
	}
	const searches = 6
	var wg sync.WaitGroup
	errs := make(chan error, searches*3)
	for g := 0; g < searches; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 3; r++ {
				no := false
				// _raw is read (events decoded from the journals) as well
				// as the index's postings and the columns.
				resp, err := query.Search(context.Background(), query.Request{Query: "common | eval l=len(_raw) | stats count sum(l) by host", AllowPartial: &no}, s.Segments())
				if err != nil {
					errs <- err
					return
				}
				total := 0
				for _, row := range resp.Results {
					var c int
					fmt.Sscan(fmt.Sprint(row["count"]), &c)
					total += c
				}
				if total != n*per {
					errs <- fmt.Errorf("search counted %d, want %d", total, n*per)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := &s.Stats.Files
	inFlight := int64(searches * runtime.GOMAXPROCS(0))
	if st.Peak.Load() > 4+inFlight {
		t.Fatalf("peak %d descriptors, want at most the cap 4 + %d reads in flight", st.Peak.Load(), inFlight)
	}
	if st.Open.Load() > 4 {
		t.Fatalf("%d descriptors held after the searches, cap 4", st.Open.Load())
	}
	if st.Evictions.Load() == 0 || st.Opens.Load() <= 4 {
		t.Fatalf("opens %d evictions %d: want the cache to have cycled", st.Opens.Load(), st.Evictions.Load())
	}
}

// TestFileCacheSearchesDuringIngestAndRolls: with a cache of 2 descriptors,
// searches running while buckets are written and rolled never fail, and
// the final count is exact.
func TestFileCacheSearchesDuringIngestAndRolls(t *testing.T) {
	s := mustOpen(t, Options{Dir: t.TempDir(), Searchable: true, MaxOpenFiles: 2, MaxHotBytes: 4000, BlockBytes: 600})
	defer s.Close()
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				no := false
				if _, err := query.Search(context.Background(), query.Request{Query: "common | stats count", AllowPartial: &no}, s.Segments()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	const batches, per = 40, 25
	for i := 0; i < batches; i++ {
		waitDurable(t, appendN(t, s, "main", i*per, per))
		if i%7 == 6 {
			s.RollAll()
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("search during ingest: %v", err)
	}
	if err := s.WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := searchCount(t, s.Segments(), "common | stats count", "", ""); got != batches*per {
		t.Fatalf("count %d, want %d", got, batches*per)
	}
	if got := len(allEvents(t, s)); got != batches*per {
		t.Fatalf("%d events read back, want %d", got, batches*per)
	}
}

// TestCachedFileReplacedIsAnError: a descriptor reopened after an eviction
// must be the file first read; a file replaced in between is an error, not
// other bytes at the old offsets.
func TestCachedFileReplacedIsAnError(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("first"), 0o644)
	os.WriteFile(b, []byte("other"), 0o644)
	fc := newFileCache(1, nil)
	ha, hb := fc.handle(a), fc.handle(b)
	buf := make([]byte, 5)
	if _, err := ha.ReadAt(buf, 0); err != nil || string(buf) != "first" {
		t.Fatalf("read a: %q %v", buf, err)
	}
	if _, err := hb.ReadAt(buf, 0); err != nil { // evicts a (cap 1)
		t.Fatal(err)
	}
	os.WriteFile(a+".tmp", []byte("XXXXX"), 0o644)
	os.Rename(a+".tmp", a)
	if _, err := ha.ReadAt(buf, 0); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("read of a replaced file: %q %v, want an error", buf, err)
	}
}

// TestCachedFilePinnedNeverClosed: a descriptor held by a read is not
// evicted (the cache goes over its cap for that read) nor closed by Close;
// both happen once the read lets go.
func TestCachedFilePinnedNeverClosed(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i := 0; i < 3; i++ {
		p := filepath.Join(dir, fmt.Sprint(i))
		os.WriteFile(p, []byte(fmt.Sprint("file", i)), 0o644)
		paths = append(paths, p)
	}
	st := &FileStats{}
	fc := newFileCache(1, st)
	h0 := fc.handle(paths[0])
	f0, err := h0.acquire()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	for _, p := range paths[1:] {
		if _, err := fc.handle(p).ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
	}
	h0.Close()
	if _, err := f0.ReadAt(buf, 0); err != nil || string(buf) != "file0" {
		t.Fatalf("pinned descriptor: %q %v", buf, err)
	}
	// Over the cap only during each other read: the pinned one stays.
	if st.Open.Load() != 1 || st.Peak.Load() != 2 {
		t.Fatalf("%d open (peak %d) while one is pinned, want 1 (peak 2)", st.Open.Load(), st.Peak.Load())
	}
	h0.release()
	if st.Open.Load() != 0 {
		t.Fatalf("%d open after the closed file's release, want 0", st.Open.Load())
	}
	if _, err := h0.ReadAt(buf, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after Close: %v", err)
	}
}
