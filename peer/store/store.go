// Package store owns a peer's bucket storage: hot buckets whose journal is a
// sequence of compressed, checksummed, numbered blocks with group-committed
// fsyncs; rolls to warm; the searchable index of a bucket (term dictionary,
// postings, field postings, per-block time ranges, bloom filter, metadata);
// journal-only copies and their rebuild into searchable ones; truncation;
// and crash recovery. See DESIGN.md in the parent folder for the formats and
// the crash-safety argument.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/query"
)

// Options configure a Store. Zero values take the defaults noted.
type Options struct {
	Dir        string // data folder; buckets live in Dir/buckets
	GUID       string // the peer's GUID, part of every bucket id
	Searchable bool   // whether new buckets are searchable copies
	// Roll limits (SPEC §3): a hot bucket rolls when its uncompressed event
	// bytes reach MaxHotBytes (default 32 MiB). An index has at most
	// MaxHotBuckets (default 3) hot buckets besides its quarantine bucket,
	// whatever the events' times: an event goes to a hot bucket it fits
	// without making it span more than MaxHotSpan (default 90 days), else
	// to a new one while the index has fewer than MaxHotBuckets, else to
	// the one it widens least (placement.go).
	MaxHotBytes   int64
	MaxHotSpan    time.Duration
	MaxHotBuckets int
	// Peer-wide limits (hotcap.go): at most MaxHotBucketsTotal hot buckets
	// over all indexes (default 256; past it the least recently written
	// one rolls); a hot bucket with no event for MaxHotIdle rolls (default
	// 1 h, negative: never); at most MaxIndexes indexes held unless
	// declared (default 1,000, negative: no cap).
	MaxHotBucketsTotal int
	MaxHotIdle         time.Duration
	MaxIndexes         int
	// Quarantine (Splunk's quarantinePastSecs / quarantineFutureSecs): an
	// event more than QuarantinePast before or QuarantineFuture after the
	// peer's clock at ingest goes to the index's one quarantine bucket
	// (defaults 900 days and 30 days; a negative value turns that side
	// off).
	QuarantinePast   time.Duration
	QuarantineFuture time.Duration
	// KeepDamaged: at open, a hot journal whose block fails its checksum
	// with a whole, valid block after it is kept as it is and the copy
	// marked corrupt (not served, reported at registration, replaced from
	// another copy), instead of cut at the damaged block, which dropped
	// every intact block after it. A cluster peer sets it: every
	// acknowledged block is also on another copy, so the managers repair
	// the copy without reducing acknowledged data. A standalone peer keeps
	// cutting: its copy is the only one, and a damaged block followed by a
	// whole one may also be blocks written after the last fsync that a
	// power loss persisted out of order (then none of them was
	// acknowledged). A torn tail (the last block cut short) is cut either
	// way.
	KeepDamaged bool
	// MaxOpenFiles caps the descriptors kept open for reading copies
	// (journals, index and column files; filecache.go). 0 takes
	// DefaultMaxOpenFiles (half the soft RLIMIT_NOFILE, 16 to 4,096).
	MaxOpenFiles int
	// Now is the clock quarantine is judged by (default time.Now).
	Now func() time.Time
	// Block sealing (SPEC §4): 128 KiB of payload or 200 ms.
	BlockBytes    int
	BlockInterval time.Duration
	// Back-pressure: Busy reports true while more than MaxPendingBytes of
	// sealed blocks wait for the disk or more than MaxUnindexed events wait
	// for the indexer (defaults 32 MiB and 50,000).
	MaxPendingBytes int64
	MaxUnindexed    int64
	Logger          *slog.Logger
	// BeforeWrite, for tests, is called by the writer before each group of
	// blocks is written (a test can hold the disk back with it).
	BeforeWrite func()
	// KeysLearned, when set, hears the idempotency key records of the
	// blocks a replica append made durable here (keys.go); it must not
	// block. The records of copies already on disk are read with
	// KeyRecords.
	KeysLearned func([]KeyRecord)
	// WriteFault, for tests, is called before each journal write (hot
	// blocks and replicas) and before a roll writes a bucket's index and
	// metadata; an error it returns is taken as the write's —
	// syscall.ENOSPC plays a full disk (diskfull.go).
	WriteFault func() error
}

func (o *Options) defaults() {
	if o.MaxHotBytes <= 0 {
		o.MaxHotBytes = 32 << 20
	}
	if o.MaxHotSpan <= 0 {
		o.MaxHotSpan = 90 * 24 * time.Hour
	}
	if o.MaxHotBuckets <= 0 {
		o.MaxHotBuckets = 3
	}
	if o.MaxHotBucketsTotal <= 0 {
		o.MaxHotBucketsTotal = DefaultMaxHotBucketsTotal
	}
	if o.MaxHotIdle == 0 {
		o.MaxHotIdle = DefaultMaxHotIdle
	}
	if o.MaxIndexes == 0 {
		o.MaxIndexes = DefaultMaxIndexes
	}
	if o.QuarantinePast == 0 {
		o.QuarantinePast = 900 * 24 * time.Hour
	}
	if o.QuarantineFuture == 0 {
		o.QuarantineFuture = 30 * 24 * time.Hour
	}
	if o.MaxOpenFiles <= 0 {
		o.MaxOpenFiles = DefaultMaxOpenFiles()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BlockBytes <= 0 {
		o.BlockBytes = 128 << 10
	}
	if o.BlockInterval <= 0 {
		o.BlockInterval = 200 * time.Millisecond
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = 32 << 20
	}
	if o.MaxUnindexed <= 0 {
		o.MaxUnindexed = 50_000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Errors of the store.
var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store is closed")
	// ErrBadIndex is returned for an index name the store cannot hold.
	ErrBadIndex = errors.New("invalid index name")
	// ErrNoBucket is returned for an unknown bucket id.
	ErrNoBucket = errors.New("no such bucket")
	// ErrBucketState is returned when an operation does not fit the
	// bucket's state (e.g. truncating a hot bucket).
	ErrBucketState = errors.New("operation does not fit the bucket state")
)

// ValidIndexName reports whether name can be an index: lower-case letters,
// digits, '_' and '-', starting with a letter or digit, at most 80 bytes
// (fsm.ValidIndexName, the one validator of ids).
func ValidIndexName(name string) bool { return fsm.ValidIndexName(name) == nil }

// Stats are counters for metrics.
type Stats struct {
	EventsAppended  atomic.Int64
	BlocksWritten   atomic.Int64
	BytesWritten    atomic.Int64
	Fsyncs          atomic.Int64
	Rolls           atomic.Int64
	Repairs         atomic.Int64
	FsyncNanos      atomic.Int64
	PendingBytes    atomic.Int64
	Unindexed       atomic.Int64
	RollsInProgress atomic.Int64
	Files           FileStats // the file cache (filecache.go)
	// The peer-wide limits (hotcap.go): rolls to stay within
	// MaxHotBucketsTotal, rolls of idle buckets, and Appends refused by
	// ErrHotBucketsFull and by ErrTooManyIndexes.
	HotCapRolls     atomic.Int64
	IdleRolls       atomic.Int64
	HotCapRefused   atomic.Int64
	IndexCapRefused atomic.Int64
}

// Store is a peer's bucket storage. Its side concerns are small types that
// borrow it: Replicas (replication), Repairs (fixups of warm copies),
// Limits (roll limits and peer-wide caps) and Keys (key records on disk).
type Store struct {
	opts   Options
	report Report
	dir    string
	log    *slog.Logger
	Stats  Stats

	mu      sync.Mutex // guards the append side: indexes, hot buckets' open blocks
	indexes map[string]*indexState
	buckets map[string]*Bucket // every copy, by id (guarded by bmu)
	bmu     sync.RWMutex
	// indexCopies counts the copies of each index held (guarded by bmu;
	// putBucket, dropBucket); declared are the indexes MaxIndexes never
	// refuses (guarded by mu; hotcap.go).
	indexCopies map[string]int
	declared    map[string]bool
	closed      bool
	failed      atomic.Pointer[error]
	// failedCh is closed when failed is set (wakes Wait).
	failedCh chan struct{}
	// idle wakes WaitIdle when a roll ends or events are indexed.
	idle wakeup

	writeCh chan writeJob
	indexCh chan indexJob
	rollCh  chan *Bucket
	stop    chan struct{}
	wg      sync.WaitGroup

	space diskSpace  // whether the writer waits for room (diskfull.go)
	repl  replState  // replication hooks and replica copies (replica.go)
	files *fileCache // read descriptors of every copy (filecache.go)
	// dataSizes are the per-index roll sizes (guarded by mu; datasize.go).
	dataSizes map[string]int64
}

type indexState struct {
	name   string
	hot    []*Bucket // in creation order
	nextID uint64
}

// Ack is the durability of one Append: done once every event it added is
// fsynced.
type Ack struct{ toks []*blockToken }

// Wait blocks until every event of the Append is durable by the same rule
// as Durable (fsynced here and, in a cluster, on the copies the ack rule
// demands), the store fails or closes, or ctx ends. It is woken by the
// writer and the replication hook, not by polling.
func (s *Store) Wait(ctx context.Context, a *Ack) error {
	for _, t := range a.toks {
		select {
		case <-t.durable:
		case <-s.failedCh:
			if t.isDurable() {
				continue
			}
			return s.Err()
		case <-s.space.fullSignal():
			if t.isDurable() {
				continue
			}
			return ErrDiskFull
		case <-s.stop:
			if t.isDurable() {
				continue
			}
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// SealOpen seals the open blocks that hold events of a, so a caller that
// waits for them (Wait) waits for one fsync rather than a block interval.
// Events appended since stay in a new open block.
func (s *Store) SealOpen(a *Ack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, is := range s.indexes {
		for _, b := range is.hot {
			if b.open.n > 0 && slices.Contains(a.toks, b.openTok) {
				s.sealLocked(b)
			}
		}
	}
}

// Join is the durability of the events of both a and b (a nil Ack has no
// events: durable).
func (a *Ack) Join(b *Ack) *Ack {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return &Ack{toks: append(slices.Clip(a.toks), b.toks...)}
}

// Durable reports whether every event of the Append is on disk.
func (a *Ack) Durable() bool {
	for _, t := range a.toks {
		if !t.done.Load() || (t.needRepl && !t.repl.Load()) {
			return false
		}
	}
	return true
}

// blockToken is the durability of one block: done once fsynced here, and,
// when a replication hook is set (cluster mode), repl once the hook says the
// block is on enough copies (replica.go).
type blockToken struct {
	done     atomic.Bool
	local    chan struct{} // closed once done (Flush, Close)
	needRepl bool
	repl     atomic.Bool
	// durable is closed once done and, when needRepl, repl (Store.Wait).
	durable chan struct{}
	once    sync.Once
}

func newBlockToken(needRepl bool) *blockToken {
	return &blockToken{needRepl: needRepl, durable: make(chan struct{}), local: make(chan struct{})}
}

// markDone records that the block is fsynced here and wakes its waiters.
func (t *blockToken) markDone() {
	if t.done.CompareAndSwap(false, true) {
		close(t.local)
	}
	t.settle()
}

func (t *blockToken) isDurable() bool {
	return t.done.Load() && (!t.needRepl || t.repl.Load())
}

// settle closes durable once both conditions hold; called after each of
// them is set, so whichever comes last closes it.
func (t *blockToken) settle() {
	if t.isDurable() {
		t.once.Do(func() { close(t.durable) })
	}
}

type writeJob struct {
	blk   *sealedBlock
	close *Bucket // close this bucket's journal (after its blocks)
}

type indexJob struct {
	b    *Bucket
	evs  []Event
	roll bool
	rel  *releaser
}

// releaser calls fn once every holder has let go of a batch's bytes.
type releaser struct {
	n  atomic.Int32
	fn func()
}

func (r *releaser) done() {
	if r != nil && r.n.Add(-1) == 0 && r.fn != nil {
		r.fn()
	}
}

type sealedBlock struct {
	b        *Bucket
	no       uint32
	firstOrd uint32
	events   uint32
	minT     int64
	maxT     int64
	payload  []byte
	keys     []byte // the block's encoded key section (keys.go), nil for none
	tok      *blockToken
}

// Open opens (and recovers) the store in opts.Dir and starts its writer,
// indexer, roller and sealer.
func Open(opts Options) (*Store, error) {
	opts.defaults()
	if opts.GUID == "" {
		return nil, errors.New("store: a peer GUID is required")
	}
	s := &Store{
		opts:     opts,
		dir:      filepath.Join(opts.Dir, "buckets"),
		log:      opts.Logger,
		indexes:  map[string]*indexState{},
		buckets:  map[string]*Bucket{},
		declared: map[string]bool{"main": true},
		// counted by putBucket and dropBucket
		indexCopies: map[string]int{},
		writeCh:     make(chan writeJob, 256),
		indexCh:     make(chan indexJob, 64),
		rollCh:      make(chan *Bucket, 1),
		stop:        make(chan struct{}),
		failedCh:    make(chan struct{}),
	}
	s.files = newFileCache(opts.MaxOpenFiles, &s.Stats.Files)
	if err := os.MkdirAll(s.dir, DirPerm); err != nil {
		return nil, err
	}
	if err := (recovery{s}).recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.wg.Add(4)
	go s.writer()
	go s.indexer()
	go s.roller()
	go s.sealer()
	if opts.MaxHotIdle > 0 {
		s.wg.Add(1)
		go s.Limits().idleRoller(opts.MaxHotIdle)
	}
	return s, nil
}

// Options returns the store's options with defaults applied (the roll
// limits as SetRollLimits last set them).
func (s *Store) Options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// Err returns the error that stopped the store from writing, if any.
func (s *Store) Err() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail stops the store from acknowledging. Running out of file descriptors
// never does: it is a want of a resource, not damage, and every caller
// returns it to its request (filecache.go).
func (s *Store) fail(err error) {
	if isFDError(err) {
		s.log.Warn("out of file descriptors; the request fails, the store goes on", "err", err)
		return
	}
	if s.failed.CompareAndSwap(nil, &err) {
		close(s.failedCh)
		s.log.Error("store failed; no more events are acknowledged", "err", err)
	}
}

// Busy reports back-pressure: the disk or the indexer is behind by more than
// the configured bounds, so new data should be refused for now.
func (s *Store) Busy() bool {
	return s.space.full.Load() || s.Stats.PendingBytes.Load() > s.opts.MaxPendingBytes ||
		s.Stats.Unindexed.Load() > s.opts.MaxUnindexed ||
		s.Stats.RollsInProgress.Load() > 2
}

// Append adds events (each with its Index) to hot buckets, in order, and
// returns their durability. It either takes every event or none: the only
// errors are a closed or failed store and an invalid index name, checked
// before anything is added. The events' bytes must stay unchanged until the
// indexer has read them; callers hand over ownership.
func (s *Store) Append(evs []Event) (*Ack, error) {
	return s.AppendRelease(evs, nil)
}

// AppendRelease is Append that calls release (when not nil) once the store
// no longer reads the events' bytes, so the caller may reuse them. release
// is called exactly once, also when AppendRelease fails.
func (s *Store) AppendRelease(evs []Event, release func()) (*Ack, error) {
	return s.AppendKeyed(evs, release, nil)
}

// AppendKeyed is AppendRelease that records, when key is not nil, the
// request's idempotency key with its events: each block that holds some
// of them carries a KeyRecord naming which (keys.go), so every copy of the
// block knows the key. key.Ords, when set, has one entry per event.
func (s *Store) AppendKeyed(evs []Event, release func(), key *RequestKey) (*Ack, error) {
	rel := &releaser{fn: release}
	rel.n.Store(1)
	defer rel.done()
	for i := range evs {
		if !ValidIndexName(evs[i].Index) {
			return nil, fmt.Errorf("%w: %q", ErrBadIndex, evs[i].Index)
		}
	}
	if key != nil && (!ValidKey(key.Key) || (key.Ords != nil && len(key.Ords) != len(evs))) {
		return nil, fmt.Errorf("store: idempotency key %q for %d events (%d ordinals): not a valid key record", key.Key, len(evs), len(key.Ords))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if s.space.full.Load() {
		return nil, ErrDiskFull
	}
	// Place the whole request first and create the buckets it needs, so a
	// bucket that cannot be created fails the request with nothing added
	// (placement.go).
	pl, err := s.planAppend(evs)
	if err != nil {
		return nil, err // a peer-wide limit (hotcap.go): nothing added
	}
	if err := s.createPlanned(pl); err != nil {
		if isNoSpace(err) {
			// No room for a new bucket: this request fails, later ones
			// try again (diskfull.go).
			return nil, fmt.Errorf("%w: %v", ErrDiskFull, err)
		}
		if !isFDError(err) {
			// A disk error: the store stops acknowledging (DESIGN.md).
			s.fail(err)
		}
		return nil, err
	}
	s.Limits().rollForRoom(pl)
	ack := &Ack{}
	now := time.Now()
	var cur *Bucket
	start := 0
	// flush hands evs[start:end] (all of cur) to the indexer; the slice is
	// the caller's, released through rel once indexed.
	flush := func(end int) {
		if cur != nil && end > start && cur.searchable {
			s.Stats.Unindexed.Add(int64(end - start))
			rel.n.Add(1)
			s.indexCh <- indexJob{b: cur, evs: evs[start:end:end], rel: rel}
		}
		start = end
	}
	for i := range evs {
		e := &evs[i]
		sl := pl.target[i]
		b := sl.b
		if b != cur {
			flush(i)
			cur = b
		}
		if b.open.n == 0 {
			b.openFirstOrd = b.appended
			b.openSince = time.Now()
			b.openTok = newBlockToken(s.repl.hook != nil)
		}
		b.open.add(e)
		if key != nil {
			b.open.addKey(key, key.ord(i))
		}
		b.appended++
		b.rawBytes += int64(e.size())
		if b.appended == 1 || e.Time < b.minT {
			b.minT = e.Time
		}
		if b.appended == 1 || e.Time > b.maxT {
			b.maxT = e.Time
		}
		b.lastUse = sl.lastUse
		b.lastWrite = now
		tok := b.openTok
		if len(ack.toks) == 0 || ack.toks[len(ack.toks)-1] != tok {
			ack.toks = append(ack.toks, tok)
		}
		if b.open.size() >= s.opts.BlockBytes || b.open.keyBytes >= maxKeySection-64<<10 {
			s.sealLocked(b)
		}
		if pl.rollAfter[i] {
			flush(i + 1)
			s.rollLocked(b)
			cur = nil
		}
	}
	flush(len(evs))
	s.Stats.EventsAppended.Add(int64(len(evs)))
	return ack, nil
}

var tickCounter atomic.Int64

func (s *Store) tick() int64 { return tickCounter.Add(1) }

func (s *Store) nextLocalID(index string) uint64 {
	s.bmu.RLock()
	defer s.bmu.RUnlock()
	next := uint64(0)
	for _, b := range s.buckets {
		if b.index == index && b.localID >= next {
			next = b.localID + 1
		}
	}
	return next
}

// BucketID builds a bucket id: <index>~<localid>~<guid>.
func BucketID(index string, localID uint64, guid string) string {
	return index + "~" + strconv.FormatUint(localID, 10) + "~" + guid
}

func (s *Store) createBucket(is *indexState, quarantine bool) (*Bucket, error) {
	id := BucketID(is.name, is.nextID, s.opts.GUID)
	dir := filepath.Join(s.dir, id)
	ci := copyInfo{Version: 1, ID: id, Index: is.name, LocalID: is.nextID, Searchable: s.opts.Searchable, Quarantine: quarantine,
		AckCopies: s.ackCopiesLocked()}
	jf, err := createBucketFiles(s.dir, dir, ci)
	if err != nil {
		// Nothing of it stays (copy.json first: a folder without it is
		// removed at open), and its id is used by the next attempt.
		os.Remove(filepath.Join(dir, copyFile))
		os.RemoveAll(dir)
		return nil, err
	}
	is.nextID++
	b := &Bucket{
		s: s, id: id, index: is.name, localID: ci.LocalID, dir: dir, searchable: ci.Searchable, quarantine: quarantine,
		ackCopies: ci.AckCopies, state: StateHot, open: newBlockBuilder(), jf: jf, rd: s.files.handle(filepath.Join(dir, journalFile)), hash: sha256.New(),
		journalClosed: make(chan struct{}), lastWrite: time.Now(),
	}
	if b.searchable {
		b.hidx = newHotIndex()
	}
	s.putBucket(b)
	return b, nil
}

// createBucketFiles makes a bucket folder durable with its copy.json and an
// empty journal, and returns the journal open for writing.
func createBucketFiles(parent, dir string, ci copyInfo) (*os.File, error) {
	if err := os.MkdirAll(dir, DirPerm); err != nil {
		return nil, err
	}
	if err := syncDir(parent); err != nil {
		return nil, err
	}
	if err := writeJSONAtomic(dir, copyFile, ci, "copy"); err != nil {
		return nil, err
	}
	jf, err := os.OpenFile(filepath.Join(dir, journalFile), os.O_CREATE|os.O_WRONLY, FilePerm)
	if err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		jf.Close()
		return nil, err
	}
	return jf, nil
}

// sealLocked seals b's open block and queues it for the writer. s.mu held.
func (s *Store) sealLocked(b *Bucket) {
	if b.open.n == 0 {
		return
	}
	crashPoint("seal")
	p := b.open.payload(make([]byte, 0, b.open.size()+64))
	sb := &sealedBlock{b: b, no: b.nextBlock, firstOrd: b.openFirstOrd, events: uint32(b.open.n),
		minT: b.open.minT, maxT: b.open.maxT, payload: p, keys: encodeKeySection(b.open.keys), tok: b.openTok}
	b.nextBlock++
	b.mu.Lock()
	b.pending = append(b.pending, sb)
	b.mu.Unlock()
	b.open.reset()
	b.openTok = nil
	s.Stats.PendingBytes.Add(int64(len(p)))
	s.writeCh <- writeJob{blk: sb}
}

// rollLocked starts rolling a hot bucket: its last block is sealed, its
// journal closed after the writer has fsynced every block, its index frozen
// after the indexer has indexed every event, and the roller writes the
// index and metadata. s.mu held.
func (s *Store) rollLocked(b *Bucket) {
	if b.state != StateHot {
		return
	}
	s.sealLocked(b)
	is := s.indexes[b.index]
	for i, h := range is.hot {
		if h == b {
			is.hot = append(is.hot[:i:i], is.hot[i+1:]...)
			break
		}
	}
	b.mu.Lock()
	b.state = StateRolling
	b.mu.Unlock()
	s.Stats.RollsInProgress.Add(1)
	s.writeCh <- writeJob{close: b}
	s.indexCh <- indexJob{b: b, roll: true}
}

// Roll rolls a hot bucket now (on demand). Rolling a bucket that is not hot
// is a no-op. A hot replica is refused (ErrBucketState): it has no open
// block to seal and becomes warm when its origin rolls (ReplicaRoll).
func (s *Store) Roll(id string) error {
	b := s.bucket(id)
	if b == nil {
		return fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	hotReplica := b.replica && b.state == StateHot
	b.mu.RUnlock()
	if hotReplica {
		return fmt.Errorf("%w: %s is a hot replica here; it rolls when its origin does", ErrBucketState, id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.rollLocked(b)
	return nil
}

// RollAll rolls every hot bucket.
func (s *Store) RollAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, is := range s.indexes {
		for _, b := range append([]*Bucket(nil), is.hot...) {
			s.rollLocked(b)
		}
	}
}

// sealer seals open blocks older than BlockInterval.
func (s *Store) sealer() {
	defer s.wg.Done()
	t := time.NewTicker(max(s.opts.BlockInterval/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			for _, is := range s.indexes {
				for _, b := range is.hot {
					if b.open.n > 0 && now.Sub(b.openSince) >= s.opts.BlockInterval {
						s.sealLocked(b)
					}
				}
			}
			s.mu.Unlock()
		}
	}
}

// writer appends sealed blocks to journals and fsyncs them in groups: every
// block queued while one fsync runs is covered by the next.
func (s *Store) writer() {
	defer s.wg.Done()
	var frame []byte
	for {
		var group []writeJob
		select {
		case j, ok := <-s.writeCh:
			if !ok {
				return
			}
			group = append(group, j)
		case <-s.stop:
			return
		}
	drain:
		for len(group) < 512 {
			select {
			case j := <-s.writeCh:
				group = append(group, j)
			default:
				break drain
			}
		}
		if s.opts.BeforeWrite != nil {
			s.opts.BeforeWrite()
		}
		if s.Err() != nil {
			continue // failed: nothing more becomes durable
		}
		order, open := s.writeGroup(group, &frame)
		if !open {
			return // closed while the disk was full: nothing more becomes durable
		}
		if s.Err() != nil {
			continue
		}
		// Publish: the blocks are durable.
		for _, b := range order {
			b.mu.Lock()
			for _, w := range b.written {
				b.blocks = append(b.blocks, w)
				b.events += w.events
				b.journalBytes = w.off + w.frameLen
				var c [4]byte
				binary.LittleEndian.PutUint32(c[:], w.crc)
				b.hash.Write(c[:])
				if len(b.pending) > 0 {
					s.Stats.PendingBytes.Add(-int64(len(b.pending[0].payload)))
					b.pending[0] = nil
					b.pending = b.pending[1:]
				}
			}
			b.written = b.written[:0]
			b.mu.Unlock()
		}
		for _, j := range group {
			if j.blk != nil {
				j.blk.tok.markDone()
				s.Stats.BlocksWritten.Add(1)
				s.Replicas().replBlockDurable(j.blk)
			}
			if b := j.close; b != nil {
				if err := b.jf.Close(); err != nil {
					s.fail(fmt.Errorf("close journal of %s: %w", b.id, err))
				}
				b.jf = nil
				close(b.journalClosed)
				s.Replicas().replJournalClosed(b)
			}
		}
	}
}

// indexer indexes events of searchable hot buckets in append order and
// hands rolled buckets to the roller once their last event is indexed.
func (s *Store) indexer() {
	defer s.wg.Done()
	for {
		select {
		case j := <-s.indexCh:
			if j.roll {
				select {
				case s.rollCh <- j.b:
				case <-s.stop:
					return
				}
				continue
			}
			h := j.b.hidx
			h.mu.Lock()
			for i := range j.evs {
				h.addLocked(&j.evs[i])
			}
			h.mu.Unlock()
			s.Stats.Unindexed.Add(-int64(len(j.evs)))
			s.idle.notify()
			j.rel.done()
		case <-s.stop:
			return
		}
	}
}

// Flush seals every open block and waits until all of them are durable.
func (s *Store) Flush() error {
	s.mu.Lock()
	toks := s.sealOpenLocked()
	s.mu.Unlock()
	return s.waitLocal(toks, false)
}

// Close seals and flushes open blocks, waits for rolls in progress, stops
// the store's goroutines and closes its files. Hot buckets stay hot on disk
// and roll when the store opens next (SPEC §2: a bucket rolls when its
// origin restarts).
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	toks := s.sealOpenLocked()
	s.mu.Unlock()
	// On a full disk the blocks stay unwritten (ErrDiskFull); nothing of
	// them was acknowledged.
	ferr := s.waitLocal(toks, true)
	if err := s.WaitIdle(time.Minute); err != nil && ferr == nil {
		ferr = err
	}
	close(s.stop)
	s.wg.Wait()
	s.closeFiles()
	return ferr
}

func (s *Store) closeFiles() {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	for _, b := range s.buckets {
		b.mu.Lock()
		if b.jf != nil {
			b.jf.Close()
			b.jf = nil
		}
		if b.rd != nil {
			b.rd.Close()
		}
		if b.widx != nil {
			b.widx.close()
		}
		b.mu.Unlock()
	}
}

func (s *Store) bucket(id string) *Bucket {
	s.bmu.RLock()
	defer s.bmu.RUnlock()
	return s.buckets[id]
}

func (s *Store) sortedBuckets() []*Bucket {
	s.bmu.RLock()
	out := make([]*Bucket, 0, len(s.buckets))
	for _, b := range s.buckets {
		out = append(out, b)
	}
	s.bmu.RUnlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].index != out[j].index {
			return out[i].index < out[j].index
		}
		return out[i].localID < out[j].localID
	})
	return out
}

// Segments returns a query.Segment for every searchable copy: warm ones
// read their index files, hot ones are consistent snapshots.
func (s *Store) Segments() []query.Segment {
	var out []query.Segment
	for _, b := range s.sortedBuckets() {
		if seg := b.segment(); seg != nil {
			out = append(out, seg)
		}
	}
	return out
}

// Segment returns the segment of one bucket, nil when it is not searchable.
func (s *Store) Segment(id string) query.Segment {
	b := s.bucket(id)
	if b == nil {
		return nil
	}
	return b.segment()
}
