package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"
)

// Idempotency keys in the journal (peer/DESIGN.md, "Idempotent retries").
//
// A HEC request that carries an Idempotency-Key is appended with
// AppendKeyed: every block that holds events of it records, beside those
// events, which of the request's events it holds (KeyRecord). Such a block
// is written as a version 2 frame (journal.go): the frame header's
// reserved bytes 5–7 give the length of a key section that sits between
// the header and the compressed payload, inside what the frame's CRC
// covers. A block without keys stays a version 1 frame, byte for byte what
// this peer wrote before keys existed; both versions open.
//
// Key section, version 1:
//
//	1     section version (1)
//	uvarint n                       records
//	n × record:
//	  32  token digest (SHA-256 of the HEC token's secret)
//	  32  body hash (SHA-256 of what the request's events were decoded from)
//	  uvarint len, bytes            the key (1..MaxKeyLen printable ASCII)
//	  varint                        arrival at the origin (unix ns)
//	  uvarint total, first, count   events [first, first+count) of the
//	                                request's total are in this block
//	4     CRC-32C of the bytes before it (the section is read alone at open)

// MaxKeyLen is the longest Idempotency-Key a request may carry (bytes).
const MaxKeyLen = 256

// maxKeySection bounds one block's key section; a block whose records
// reach it is sealed (the frame header holds 24 bits of length).
const maxKeySection = 1 << 20

const keySectionVersion = 1

// KeyRecord says that events [First, First+Count) of a request of Total
// events, which carried Key under the token whose digest is Token and whose
// body hashed to BodyHash, lie in one block.
type KeyRecord struct {
	Token    [32]byte
	BodyHash [32]byte
	Key      string
	Arrival  int64 // unix ns, the origin's clock
	Total    uint32
	First    uint32
	Count    uint32
	// Origin is the GUID of the origin of the bucket the block belongs to
	// (the last part of its id). It is not encoded: a reader sets it from
	// the copy it read the record from (KeyRecords, a replica append's
	// Options.KeysLearned, BlockKeys); "" for a record not read from a copy.
	Origin string
}

// RequestKey is what AppendKeyed records with a request's events.
type RequestKey struct {
	Token    [32]byte
	BodyHash [32]byte
	Key      string
	Arrival  int64
	Total    uint32 // events of the whole request
	// Ords is the request ordinal of each appended event, ascending (nil:
	// 0, 1, 2 …): a retry that finds part of its request stored appends
	// only the rest.
	Ords []uint32
}

func (k *RequestKey) ord(i int) uint32 {
	if k.Ords == nil {
		return uint32(i)
	}
	return k.Ords[i]
}

// recordSize is a record's encoded size at most.
func recordSize(key string) int { return 64 + 2 + len(key) + 10 + 15 }

// addKey notes that the event just added to the block is ordinal ord of
// the request rk.
func (b *blockBuilder) addKey(rk *RequestKey, ord uint32) {
	if n := len(b.keys); n > 0 && b.lastKey == rk && b.keys[n-1].First+b.keys[n-1].Count == ord {
		b.keys[n-1].Count++
		return
	}
	b.keys = append(b.keys, KeyRecord{Token: rk.Token, BodyHash: rk.BodyHash, Key: rk.Key, Arrival: rk.Arrival,
		Total: rk.Total, First: ord, Count: 1})
	b.lastKey = rk
	b.keyBytes += recordSize(rk.Key)
}

// encodeKeySection encodes records as a version 1 key section (nil for
// none).
func encodeKeySection(recs []KeyRecord) []byte {
	if len(recs) == 0 {
		return nil
	}
	out := []byte{keySectionVersion}
	out = binary.AppendUvarint(out, uint64(len(recs)))
	for i := range recs {
		r := &recs[i]
		out = append(out, r.Token[:]...)
		out = append(out, r.BodyHash[:]...)
		out = binary.AppendUvarint(out, uint64(len(r.Key)))
		out = append(out, r.Key...)
		out = binary.AppendVarint(out, r.Arrival)
		out = binary.AppendUvarint(out, uint64(r.Total))
		out = binary.AppendUvarint(out, uint64(r.First))
		out = binary.AppendUvarint(out, uint64(r.Count))
	}
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// ValidKey reports whether k can be an idempotency key: 1 to MaxKeyLen
// bytes of printable ASCII.
func ValidKey(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// decodeKeySection decodes and checks a key section of a block of events
// events: its checksum, version, every record whole and within its
// request, and no more events claimed than the block holds.
func decodeKeySection(p []byte, events uint32) ([]KeyRecord, error) {
	if len(p) < 6 {
		return nil, fmt.Errorf("%w: key section of %d bytes", ErrCorrupt, len(p))
	}
	body := p[:len(p)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(p[len(p)-4:]) {
		return nil, fmt.Errorf("%w: key section checksum mismatch", ErrCorrupt)
	}
	if body[0] != keySectionVersion {
		return nil, fmt.Errorf("%w: key section version %d, this peer reads %d", ErrCorrupt, body[0], keySectionVersion)
	}
	r := &payloadReader{b: body[1:]}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b))/66 {
		return nil, fmt.Errorf("%w: key section claims %d records in %d bytes", ErrCorrupt, n, len(r.b))
	}
	out := make([]KeyRecord, 0, n)
	var claimed uint64
	for i := uint64(0); i < n && r.err == nil; i++ {
		var k KeyRecord
		copy(k.Token[:], r.bytes(32))
		copy(k.BodyHash[:], r.bytes(32))
		k.Key = string(r.bytes(r.uvarint()))
		k.Arrival = r.varint()
		total, first, count := r.uvarint(), r.uvarint(), r.uvarint()
		if r.err != nil {
			break
		}
		if !ValidKey(k.Key) || count == 0 || total > 1<<32-1 || first > total || count > total-first {
			return nil, fmt.Errorf("%w: key record %d (key %q, events %d+%d of %d)", ErrCorrupt, i, k.Key, first, count, total)
		}
		k.Total, k.First, k.Count = uint32(total), uint32(first), uint32(count)
		claimed += count
		out = append(out, k)
	}
	if r.err != nil {
		return nil, fmt.Errorf("key section: %w", r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes in the key section", ErrCorrupt, len(r.b))
	}
	if claimed > uint64(events) {
		return nil, fmt.Errorf("%w: key records claim %d events of a block of %d", ErrCorrupt, claimed, events)
	}
	return out, nil
}

// frameKeys returns the key records of a whole, checked frame (none for a
// version 1 frame).
func frameKeys(frame []byte, fh frameHeader) ([]KeyRecord, error) {
	if fh.keysLen == 0 {
		return nil, nil
	}
	return decodeKeySection(frame[frameHeaderLen:frameHeaderLen+int(fh.keysLen)], fh.events)
}

// FramesKeys returns the key records of replication frames before they
// are appended (idem.Index.Arrive marks them pending meanwhile). A frame
// whose header or key section does not decode gives none: the append,
// which verifies every frame whole, refuses it.
func FramesKeys(frames [][]byte) []KeyRecord {
	var out []KeyRecord
	for _, fr := range frames {
		if len(fr) < frameHeaderLen {
			continue
		}
		fh, err := parseFrameHeader(fr)
		if err != nil || fh.keysLen == 0 || len(fr) < frameHeaderLen+int(fh.keysLen) {
			continue
		}
		if recs, err := frameKeys(fr, fh); err == nil {
			out = append(out, recs...)
		}
	}
	return out
}

// Keys reads the idempotency key records of the copies on disk.
type Keys struct{ s *Store }

// Keys returns the store's reader of key records.
func (s *Store) Keys() Keys { return Keys{s} }

// KeyRecords calls fn with the key record of every block of every copy on
// this peer — origin and replica, hot and warm — that arrived at or after
// since. Only the key sections are read (a version 1 frame costs its
// header), and a journal last written before since is skipped whole. A
// section that fails its checksum is skipped and logged. A peer calls it
// once, after Open, to rebuild its key index.
func (k Keys) KeyRecords(since time.Time, fn func(KeyRecord)) {
	s := k.s
	r := keyReader{s: s, since: since, fn: fn, hdr: make([]byte, frameHeaderLen)}
	for _, b := range s.sortedBuckets() {
		b.mu.RLock()
		blocks, rd, state := b.blocks, b.rd, b.state
		b.mu.RUnlock()
		if rd == nil || state == StateRemoved || state == StateCorrupt {
			continue
		}
		if st, err := os.Stat(filepath.Join(b.dir, journalFile)); err != nil || st.ModTime().Before(since) {
			continue
		}
		r.copy(b.id, rd, blocks, func(_ int, recs []KeyRecord) {
			for _, k := range recs {
				if k.Arrival >= r.since.UnixNano() {
					r.fn(k)
				}
			}
		})
		rd.dropIdle() // as recovery does: reading keys leaves no descriptor cached
	}
}

// BlockKeys is the key records of one block of a copy.
type BlockKeys struct {
	Block  int         // the block's number
	Events uint32      // events the block holds
	Keys   []KeyRecord // none for a block without keyed events
}

// BlockKeys reads the key sections of the blocks of copy id from block
// from on, one BlockKeys per block (Origin set from the id), in order. A
// section that cannot be read or does not decode ends the list there with
// the error: the caller learns what the blocks before it hold.
func (s *Store) BlockKeys(id string, from int) ([]BlockKeys, error) {
	b := s.bucket(id)
	if b == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoBucket, id)
	}
	b.mu.RLock()
	blocks, rd, state := b.blocks, b.rd, b.state
	b.mu.RUnlock()
	if rd == nil || state == StateRemoved || state == StateCorrupt {
		return nil, fmt.Errorf("%w: %s is %s", ErrBucketState, id, state)
	}
	if from < 0 || from > len(blocks) {
		return nil, fmt.Errorf("block keys of %s from %d: it holds %d blocks", id, from, len(blocks))
	}
	defer rd.dropIdle()
	var out []BlockKeys
	r := keyReader{s: s, hdr: make([]byte, frameHeaderLen), strict: true}
	err := r.copy(id, rd, blocks[from:], func(i int, recs []KeyRecord) {
		out = append(out, BlockKeys{Block: from + i, Events: blocks[from+i].events, Keys: recs})
	})
	return out, err
}

// keyReader reads key sections for KeyRecords, reusing its buffers.
type keyReader struct {
	s        *Store
	since    time.Time
	fn       func(KeyRecord)
	hdr, sec []byte
	// strict: a block whose key section does not decode ends the read
	// (BlockKeys), instead of being skipped (KeyRecords).
	strict bool
}

// copy reads the key sections of one copy's blocks and calls fn with each
// block's records (the i-th of blocks; none for a version 1 frame), their
// Origin set from the copy's id. A block whose header or section cannot be
// read ends it with the error (logged); a section that does not decode is
// logged and skipped, or, when fn must see every block in order (strict),
// ends it too.
func (r *keyReader) copy(id string, rd *cachedFile, blocks []blockInfo, fn func(i int, recs []KeyRecord)) error {
	_, _, origin, _ := parseBucketDir(id)
	for i, bl := range blocks {
		if _, err := rd.ReadAt(r.hdr, bl.off); err != nil {
			r.s.log.Warn("idempotency keys: read a block header", "bucket", id, "off", bl.off, "err", err)
			return err
		}
		fh, err := parseFrameHeader(r.hdr)
		if err != nil || fh.keysLen == 0 {
			if err != nil && r.strict {
				return fmt.Errorf("block %d of %s: %w", i, id, err)
			}
			fn(i, nil)
			continue
		}
		if cap(r.sec) < int(fh.keysLen) {
			r.sec = make([]byte, fh.keysLen)
		}
		r.sec = r.sec[:fh.keysLen]
		if _, err := rd.ReadAt(r.sec, bl.off+frameHeaderLen); err != nil {
			r.s.log.Warn("idempotency keys: read a key section", "bucket", id, "off", bl.off, "err", err)
			return err
		}
		recs, err := decodeKeySection(r.sec, fh.events)
		if err != nil {
			r.s.log.Warn("idempotency keys: a key section does not decode; its keys are not known", "bucket", id, "block", fh.block, "err", err)
			if r.strict {
				return fmt.Errorf("block %d of %s: %w", fh.block, id, err)
			}
			continue
		}
		for j := range recs {
			recs[j].Origin = origin
		}
		fn(i, recs)
	}
	return nil
}
