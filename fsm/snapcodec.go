package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"sync"
)

// The binary snapshot (cluster version 3 and later). A Raft snapshot of a
// million buckets in JSON took 26 s to write and 29 s to read (issue 9
// item 6); buckets are nearly all of it, so they are written as binary
// records and the rest of the state stays JSON:
//
//	binSnapshotMagic
//	uvarint n, n bytes   the state's JSON without buckets and history (null)
//	uvarint count        then count bucket records, in id order
//	uvarint count+1      then count history deltas, in history order (0: nil)
//
// A bucket record is its strings (uvarint length, bytes), integers
// (varints), a flags byte, its copies (count, then each in peer order) and
// its primaries (count, then site and peer in site order). The whole file
// ends with the CRC-free trailer binSnapshotEnd, so a cut file is refused;
// Raft's snapshot store checksums the file itself.
//
// Only a group whose cluster version is at least BinarySnapshotVersion
// writes it: an older build cannot read it, and a follower of one may be
// sent a snapshot. State.Marshal (the deterministic JSON the determinism
// tests and the state hash compare) is unchanged; readSnapshot reads both.
const (
	binSnapshotMagic = "quarry-fsm-bin\x01\n"
	binSnapshotEnd   = "\x00end\n"
	// BinarySnapshotVersion is the cluster version from which snapshots
	// are binary.
	BinarySnapshotVersion = 3
)

// bucketFields and copyFields are the fields the binary record carries,
// in order. TestSnapshotCodecCoversEveryField fails when Bucket or Copy
// gains a field this codec does not write.
var (
	bucketFields = []string{"ID", "Index", "Origin", "OriginSite", "Hot", "Earliest", "Latest", "Size", "Events",
		"Sealed", "Blocks", "LastChecksum", "Provisional", "Degraded", "Created", "Version", "LeftAt", "Copies", "Primary"}
	copyFields  = []string{"Peer", "Searchable", "Blocks", "LastChecksum", "LengthKnown", "Corrupt", "Short"}
	deltaFields = []string{"Version", "Generation", "Site", "Bucket", "Peer", "Old", "Removed"}
)

// writeSnapshot writes the state in the format its cluster version allows:
// binary from BinarySnapshotVersion, else the JSON of Marshal.
func (s *State) writeSnapshot(w io.Writer) error {
	var b []byte
	var err error
	if s.ClusterVersion() < BinarySnapshotVersion {
		b, err = s.Marshal()
	} else {
		b, err = s.appendBinary(nil)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// appendBinary appends the binary snapshot of the state to buf.
func (s *State) appendBinary(buf []byte) ([]byte, error) {
	parts, err := s.encodeBinary(buf, 1)
	if err != nil {
		return nil, err
	}
	for _, p := range parts[1:] {
		parts[0] = append(parts[0], p...)
	}
	return parts[0], nil
}

// encodeBinary encodes the binary snapshot as consecutive parts: the head
// and the first run of bucket records appended to buf, then up to workers-1
// more runs of bucket records encoded concurrently (each into a buffer
// sized like its share of buf's capacity), the last with the history and
// the end marker. It only reads the state, allocates little besides the
// buffers and costs about a microsecond a bucket, so FSM.Snapshot runs it
// under the read lock instead of copying the state; the workers only read
// too, and are done before it returns.
func (s *State) encodeBinary(buf []byte, workers int) ([][]byte, error) {
	head := s.d
	head.Buckets, head.History = nil, nil
	hj, err := json.Marshal(&head)
	if err != nil {
		return nil, fmt.Errorf("encode fsm state: %w", err)
	}
	buf = append(buf, binSnapshotMagic...)
	buf = binary.AppendUvarint(buf, uint64(len(hj)))
	buf = append(buf, hj...)
	ids := s.bucketIDs()
	buf = binary.AppendUvarint(buf, uint64(len(ids)))
	workers = max(1, min(workers, len(ids)/minBucketsPerWorker))
	parts := make([][]byte, workers)
	per := (len(ids) + workers - 1) / workers
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		lo, hi := min(w*per, len(ids)), min((w+1)*per, len(ids))
		part := make([]byte, 0, cap(buf)/workers)
		wg.Go(func() {
			for _, id := range ids[lo:hi] {
				part = appendBucket(part, s.d.Buckets[id])
			}
			parts[w] = part
		})
	}
	for _, id := range ids[:min(per, len(ids))] {
		buf = appendBucket(buf, s.d.Buckets[id])
	}
	wg.Wait()
	parts[0] = buf
	last := &parts[workers-1]
	// The count plus one; 0 for a nil history, so the restored state
	// encodes (Marshal) to the same bytes: null and [] differ in JSON.
	hn := uint64(0)
	if s.d.History != nil {
		hn = uint64(len(s.d.History)) + 1
	}
	*last = binary.AppendUvarint(*last, hn)
	for i := range s.d.History {
		d := &s.d.History[i]
		*last = binary.AppendUvarint(*last, d.Version)
		*last = binary.AppendUvarint(*last, d.Generation)
		*last = appendStr(*last, d.Site)
		*last = appendStr(*last, d.Bucket)
		*last = appendStr(*last, d.Peer)
		*last = appendStr(*last, d.Old)
		if d.Removed {
			*last = append(*last, 1)
		} else {
			*last = append(*last, 0)
		}
	}
	*last = append(*last, binSnapshotEnd...)
	return parts, nil
}

// minBucketsPerWorker: below it a snapshot is encoded by one goroutine.
var minBucketsPerWorker = 50000

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

const (
	bHot = 1 << iota
	bSealed
	bDegraded
	bProvisional
	// bLeftAt: the record ends with LeftAt (a count, then peer and index
	// pairs); set only from cluster version LeftAtVersion, so a version 5
	// reader never meets it.
	bLeftAt
)

const (
	cSearchable = 1 << iota
	cLengthKnown
	cCorrupt
	cShort
)

func appendBucket(b []byte, x *Bucket) []byte {
	b = appendStr(b, x.ID)
	b = appendStr(b, x.Index)
	b = appendStr(b, x.Origin)
	b = appendStr(b, x.OriginSite)
	var f byte
	if x.Hot {
		f |= bHot
	}
	if x.Sealed {
		f |= bSealed
	}
	if x.Degraded {
		f |= bDegraded
	}
	if x.Provisional {
		f |= bProvisional
	}
	if x.LeftAt != nil {
		f |= bLeftAt
	}
	b = append(b, f)
	b = binary.AppendVarint(b, x.Earliest)
	b = binary.AppendVarint(b, x.Latest)
	b = binary.AppendVarint(b, x.Size)
	b = binary.AppendVarint(b, x.Events)
	b = binary.AppendVarint(b, x.Blocks)
	b = appendStr(b, x.LastChecksum)
	b = binary.AppendUvarint(b, x.Created)
	b = binary.AppendUvarint(b, x.Version)
	b = binary.AppendUvarint(b, uint64(len(x.Copies)))
	var kb [8]string
	for _, p := range smallSorted(kb[:0], x.Copies) {
		c := x.Copies[p]
		b = appendStr(b, p)
		b = appendStr(b, c.Peer)
		var cf byte
		if c.Searchable {
			cf |= cSearchable
		}
		if c.LengthKnown {
			cf |= cLengthKnown
		}
		if c.Corrupt {
			cf |= cCorrupt
		}
		if c.Short {
			cf |= cShort
		}
		b = append(b, cf)
		b = binary.AppendVarint(b, c.Blocks)
		b = appendStr(b, c.LastChecksum)
	}
	b = binary.AppendUvarint(b, uint64(len(x.Primary)))
	for _, site := range smallSorted(kb[:0], x.Primary) {
		b = appendStr(b, site)
		b = appendStr(b, x.Primary[site])
	}
	if x.LeftAt != nil {
		b = binary.AppendUvarint(b, uint64(len(x.LeftAt)))
		for _, p := range smallSorted(kb[:0], x.LeftAt) {
			b = appendStr(b, p)
			b = binary.AppendUvarint(b, x.LeftAt[p])
		}
	}
	return b
}

// smallSorted appends m's keys to buf sorted (insertion sort: a bucket
// has a handful of copies and primaries, and buf lives on the caller's
// stack).
func smallSorted[V any](buf []string, m map[string]V) []string {
	for k := range m {
		i := len(buf)
		buf = append(buf, k)
		for ; i > 0 && buf[i-1] > k; i-- {
			buf[i] = buf[i-1]
		}
		buf[i] = k
	}
	return buf
}

// readSnapshot decodes a snapshot written by writeSnapshot (either format).
func readSnapshot(b []byte) (*State, error) {
	if !bytes.HasPrefix(b, []byte(binSnapshotMagic)) {
		return Unmarshal(b)
	}
	r := &snapReader{b: b[len(binSnapshotMagic):]}
	hj := r.bytes()
	n := r.uvarint()
	if r.err != nil {
		return nil, fmt.Errorf("decode fsm snapshot: %w", r.err)
	}
	s, err := Unmarshal(append([]byte(snapshotMagic), hj...))
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, fmt.Errorf("decode fsm snapshot: %d buckets in %d bytes", n, len(r.b))
	}
	s.d.Buckets = make(map[string]*Bucket, n)
	order := make([]string, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		x := r.bucket()
		if r.err != nil {
			break
		}
		if _, dup := s.d.Buckets[x.ID]; dup {
			return nil, fmt.Errorf("decode fsm snapshot: bucket %q twice", x.ID)
		}
		s.d.Buckets[x.ID] = x
		order = append(order, x.ID)
	}
	if slices.IsSorted(order) { // as written: rebuildDerived need not sort
		s.sortedHint = order
	}
	nh := r.count(7)
	if r.err == nil && nh > 0 {
		// Room to grow: the first generation change after a restore
		// appends its deltas without copying the whole history (200,000
		// deltas at most: a copy was most of a peer-down's time).
		s.d.History = make([]Delta, nh-1, nh-1+(nh-1)/4+1024)
		for i := range s.d.History {
			d := &s.d.History[i]
			d.Version, d.Generation = r.uvarint(), r.uvarint()
			d.Site, d.Bucket, d.Peer, d.Old = r.str(), r.str(), r.str(), r.str()
			d.Removed = r.byte1() != 0
		}
	}
	if r.err == nil && string(r.b) != binSnapshotEnd {
		r.err = errors.New("no end marker: the file is cut or has trailing bytes")
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode fsm snapshot: %w", r.err)
	}
	s.rebuildDerived()
	return s, nil
}

// snapReader reads the binary records; the first error sticks.
type snapReader struct {
	b   []byte
	err error
}

var errShort = errors.New("record cut short")

func (r *snapReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *snapReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) || n > math.MaxInt32 {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *snapReader) str() string { return string(r.bytes()) }

func (r *snapReader) byte1() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.err = errShort
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// count reads a length that must be backed by at least min bytes each.
func (r *snapReader) count(min int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/min) {
		r.err = fmt.Errorf("%d entries in %d bytes", n, len(r.b))
	}
	return int(n)
}

func (r *snapReader) bucket() *Bucket {
	x := &Bucket{ID: r.str(), Index: r.str(), Origin: r.str(), OriginSite: r.str()}
	f := r.byte1()
	x.Hot, x.Sealed, x.Degraded, x.Provisional = f&bHot != 0, f&bSealed != 0, f&bDegraded != 0, f&bProvisional != 0
	x.Earliest, x.Latest, x.Size, x.Events, x.Blocks = r.varint(), r.varint(), r.varint(), r.varint(), r.varint()
	x.LastChecksum = r.str()
	x.Created, x.Version = r.uvarint(), r.uvarint()
	nc := r.count(4)
	x.Copies = make(map[string]*Copy, nc)
	for i := 0; i < nc && r.err == nil; i++ {
		key := r.str()
		c := &Copy{Peer: r.str()}
		cf := r.byte1()
		c.Searchable, c.LengthKnown, c.Corrupt, c.Short = cf&cSearchable != 0, cf&cLengthKnown != 0, cf&cCorrupt != 0, cf&cShort != 0
		c.Blocks = r.varint()
		c.LastChecksum = r.str()
		x.Copies[key] = c
	}
	np := r.count(2)
	x.Primary = make(map[string]string, np)
	for i := 0; i < np && r.err == nil; i++ {
		site := r.str()
		x.Primary[site] = r.str()
	}
	if f&bLeftAt != 0 {
		nl := r.count(2)
		x.LeftAt = make(map[string]uint64, nl)
		for i := 0; i < nl && r.err == nil; i++ {
			p := r.str()
			x.LeftAt[p] = r.uvarint()
		}
	}
	return x
}

// structFields lists a struct type's field names, for the coverage test.
func structFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).IsExported() { // unexported fields are derived
			out = append(out, t.Field(i).Name)
		}
	}
	return out
}
