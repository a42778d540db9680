package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A full disk is a want of a resource, not damage (like running out of file
// descriptors, filecache.go): it never fails the store. The writer keeps the
// group of blocks it could not write, rewinds the journals to where the
// group began and writes the group again once there is room, with a pause
// that doubles from 50 ms to 2 s; while it waits the store is Busy (HEC
// answers 503 code 9), Append refuses with ErrDiskFull, and Wait answers
// ErrDiskFull to the requests whose blocks are not durable (none of them was
// acknowledged; an event of theirs may still become durable and searchable
// once the group is written, as after any refused request a client retries
// — at least once, as HEC without acks always is). Blocks become durable in
// order, so nothing acknowledged is ever missing; no restart is needed. A
// failed fsync is retried the same way only for ENOSPC/EDQUOT, by writing
// the whole group again (the page cache may have dropped the dirty pages);
// any other write or fsync error still fails the store. Rolls short of
// space are retried like rolls short of descriptors, and a replica that
// cannot be created or written answers its origin with the error (the
// origin resends).

// ErrDiskFull is returned while the data directory's file system has no room
// for the blocks already accepted.
var ErrDiskFull = errors.New("store: the disk is full; try again later")

// isNoSpace reports whether err is a full file system or an exhausted quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, ErrDiskFull)
}

// diskSpace is the writer's view of the disk: full while a group waits for
// room. fullCh is closed when the disk becomes full and replaced when it has
// room again, so Wait is woken rather than polling.
type diskSpace struct {
	full   atomic.Bool
	mu     sync.Mutex
	fullCh chan struct{}
	since  time.Time
}

// fullSignal is closed while (and once) the disk is full.
func (d *diskSpace) fullSignal() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fullCh == nil {
		d.fullCh = make(chan struct{})
	}
	return d.fullCh
}

func (d *diskSpace) setFull(s *Store, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.full.Load() {
		return
	}
	if d.fullCh == nil {
		d.fullCh = make(chan struct{})
	}
	d.full.Store(true)
	d.since = time.Now()
	close(d.fullCh)
	s.log.Error("disk full: blocks wait for room; new data is refused until then", "err", err)
}

func (d *diskSpace) setRoom(s *Store) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.full.Load() {
		return
	}
	d.full.Store(false)
	d.fullCh = make(chan struct{})
	s.log.Info("disk has room again: the waiting blocks are written", "full_for", time.Since(d.since).Round(time.Millisecond))
}

// DiskFull reports whether the writer waits for room on the disk.
func (s *Store) DiskFull() bool { return s.space.full.Load() }

// writeGroup writes a group of sealed blocks to their journals and fsyncs
// each journal once. It returns the buckets written, in order; open is false
// when the store closed while the group waited for room.
func (s *Store) writeGroup(group []writeJob, frame *[]byte) (order []*Bucket, open bool) {
	pause := 50 * time.Millisecond
	for {
		order, err := s.writeGroupOnce(group, frame)
		if err == nil {
			s.space.setRoom(s)
			return order, true
		}
		if !isNoSpace(err) {
			s.fail(err)
			return nil, true
		}
		s.space.setFull(s, err)
		select {
		case <-s.stop:
			return nil, false
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// writeGroupOnce is one attempt; on any error the journals' write positions
// are rewound to where the group began, so a retry writes the same frames at
// the same offsets.
func (s *Store) writeGroupOnce(group []writeJob, frame *[]byte) ([]*Bucket, error) {
	type mark struct {
		jsize   int64
		written int
	}
	marks := map[*Bucket]mark{}
	var order []*Bucket
	rewind := func() {
		for b, m := range marks {
			b.jsize, b.written = m.jsize, b.written[:m.written]
		}
	}
	write := func(b *Bucket, p []byte, off int64) error {
		if f := s.opts.WriteFault; f != nil {
			if err := f(); err != nil {
				return err
			}
		}
		_, err := b.jf.WriteAt(p, off)
		return err
	}
	for _, j := range group {
		sb := j.blk
		if sb == nil {
			continue
		}
		b := sb.b
		if _, ok := marks[b]; !ok {
			marks[b] = mark{b.jsize, len(b.written)}
			order = append(order, b)
		}
		f := appendFrameKeys((*frame)[:0], sb.no, sb.events, sb.minT, sb.maxT, sb.keys, sb.payload)
		*frame = f
		half := len(f) / 2
		if err := write(b, f[:half], b.jsize); err != nil {
			rewind()
			return nil, fmt.Errorf("write journal of %s: %w", b.id, err)
		}
		crashPoint("block-write")
		if err := write(b, f[half:], b.jsize+int64(half)); err != nil {
			rewind()
			return nil, fmt.Errorf("write journal of %s: %w", b.id, err)
		}
		crc := binary.LittleEndian.Uint32(f[40:44])
		b.written = append(b.written, blockInfo{off: b.jsize, frameLen: int64(len(f)), firstOrd: sb.firstOrd,
			events: sb.events, minT: sb.minT, maxT: sb.maxT, crc: crc})
		b.jsize += int64(len(f))
		s.Stats.BytesWritten.Add(int64(len(f)))
	}
	crashPoint("fsync")
	start := time.Now()
	defer func() { s.Stats.FsyncNanos.Add(int64(time.Since(start))) }()
	for _, b := range order {
		if err := b.jf.Sync(); err != nil {
			rewind()
			return nil, fmt.Errorf("fsync journal of %s: %w", b.id, err)
		}
		s.Stats.Fsyncs.Add(1)
	}
	return order, nil
}

// deferRoll leaves a hot copy that recovery could not roll for want of room
// on disk as it is (its journal is intact; nothing is removed or rewritten)
// and out of this run: Open succeeds on a full disk, and the next open with
// room rolls it. In a cluster its copy is missing from the registration, so
// the managers restore RF from the other copies and remove the surplus once
// it is back.
func (s *Store) deferRoll(b *Bucket, err error) {
	if b.rd != nil {
		b.rd.Close()
	}
	if i := slices.Index(s.report.RolledIDs, b.id); i >= 0 {
		s.report.RolledIDs = slices.Delete(s.report.RolledIDs, i, i+1)
		s.report.Rolled--
	}
	s.report.Deferred = append(s.report.Deferred, b.id)
	s.log.Warn("no room to roll a hot copy at open; left on disk unopened until a restart with room", "bucket", b.id, "err", err)
}
