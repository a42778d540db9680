package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Journal frame, format versions 1 and 2. A journal is a sequence of
// frames, one per sealed block, numbered from 0:
//
//	off  size
//	0    4   magic "QJB" + version byte 0x01 or 0x02
//	4    1   codec (1 = zstd)
//	5    3   version 1: reserved, zero; version 2: the length of the key
//	         section (uint24 LE) that precedes the compressed payload
//	8    4   block number (uint32 LE)
//	12   4   events in the block
//	16   4   payload length before compression
//	20   4   the bytes that follow: the key section (version 2) and the
//	         payload after compression
//	24   8   earliest _time of the block (int64 unix ns)
//	32   8   latest _time of the block
//	40   4   CRC-32C of bytes 0..39 and the compressed payload
//	44   …   version 2: the key section (keys.go); then the compressed
//	         payload (see block.go)
//
// A block that records no idempotency key is written as version 1, so a
// peer that never sees the header writes what it wrote before keys
// existed; a version 2 frame is refused by a peer older than keys.
const (
	frameHeaderLen = 44
	codecZstd      = 1
	maxBlockRaw    = 64 << 20 // refuse absurd lengths when scanning
	// maxReplicaBlockRaw bounds the decompressed size of a block that
	// arrives from another peer (replication, fetch, fixup). A block is
	// sealed once it reaches block_bytes (128 KiB by default), so it holds
	// at most that plus one event (1 MiB with HEC's limits): 16 MiB leaves
	// room for a block_bytes of up to 15 MiB.
	maxReplicaBlockRaw = 16 << 20
	// noFCSMax: klauspost/compress's EncodeAll leaves Frame_Content_Size
	// out of a frame of fewer than 256 bytes unless it is single-segment
	// (content over 1 KiB); such a frame is accepted when its block header
	// declares fewer than 256 bytes, and decoding stops at that length.
	noFCSMax = 256
)

var frameMagic = [4]byte{'Q', 'J', 'B', 1}

// frameVersionKeys is the version byte of a frame with a key section.
const frameVersionKeys = 2

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frameHeader is a decoded frame header.
type frameHeader struct {
	block   uint32
	events  uint32
	rawLen  uint32
	compLen uint32
	minT    int64
	maxT    int64
	crc     uint32
	keysLen uint32 // version 2: bytes of the key section after the header
}

var (
	zencOnce sync.Once
	zenc     *zstd.Encoder
	zdecOnce sync.Once
	zdec     *zstd.Decoder // index and column sections
)

// frameDecoder decodes journal block payloads: each frame's declared
// decompressed size is checked against the block header and a limit before
// anything is decoded, and decoding writes at most that many bytes
// (WithDecodeAllCapLimit with a destination of exactly that capacity), so a
// small frame cannot make the peer allocate more than it declares.
type frameDecoder struct {
	once  sync.Once
	dec   *zstd.Decoder
	limit uint32
}

var (
	// localFrames decodes the blocks of this peer's own journals (search,
	// recovery): written here or verified by replicaFrames on arrival.
	localFrames = &frameDecoder{limit: maxBlockRaw}
	// replicaFrames decodes frames from other peers (replica append, fetch,
	// fixup): its own pool of two decoders, so a flood of replication
	// traffic never waits for search's decoders nor search for it.
	replicaFrames = &frameDecoder{limit: maxReplicaBlockRaw}
)

func (d *frameDecoder) get() *zstd.Decoder {
	d.once.Do(func() {
		var err error
		d.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(uint64(d.limit)), zstd.WithDecoderMaxWindow(uint64(d.limit)),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(err)
		}
	})
	return d.dec
}

// checkContentSize reads the zstd frame header of a block's compressed
// payload and refuses it — before anything is decoded — unless its
// Frame_Content_Size is present and equal to the block header's
// decompressed length, and that length is within limit. Only frames under
// noFCSMax bytes may leave the size out (the encoder omits it there).
func checkContentSize(fh frameHeader, comp []byte, limit uint32) error {
	if fh.rawLen > limit {
		return fmt.Errorf("%w: block %d declares %d decompressed bytes, over the %d-byte block limit", ErrCorrupt, fh.block, fh.rawLen, limit)
	}
	var zh zstd.Header
	if err := zh.Decode(comp); err != nil {
		return fmt.Errorf("%w: block %d: zstd frame header: %v", ErrCorrupt, fh.block, err)
	}
	switch {
	case zh.Skippable:
		return fmt.Errorf("%w: block %d: skippable zstd frame", ErrCorrupt, fh.block)
	case zh.DictionaryID != 0:
		return fmt.Errorf("%w: block %d: zstd frame needs dictionary %d", ErrCorrupt, fh.block, zh.DictionaryID)
	case !zh.HasFCS && fh.rawLen >= noFCSMax:
		return fmt.Errorf("%w: block %d: zstd frame declares no content size", ErrCorrupt, fh.block)
	case zh.HasFCS && zh.FrameContentSize != uint64(fh.rawLen):
		return fmt.Errorf("%w: block %d: zstd frame declares %d bytes, its header %d", ErrCorrupt, fh.block, zh.FrameContentSize, fh.rawLen)
	}
	return nil
}

// decode verifies a frame (checksum, declared sizes) and returns its
// decompressed payload, in dst when dst has room.
func (d *frameDecoder) decode(frame, dst []byte) (frameHeader, []byte, error) {
	fh, err := checkFrame(frame)
	if err != nil {
		return fh, nil, err
	}
	comp := frame[frameHeaderLen+fh.keysLen:]
	if err := checkContentSize(fh, comp, d.limit); err != nil {
		return fh, nil, err
	}
	n := int(fh.rawLen)
	// zstdSlack bytes past the content let the decoder use its fast
	// copies, which may write past a block's end, for the frame's last
	// block too (with exactly n it takes the safe ones for every block
	// of a one-block frame)
	if cap(dst) < n+zstdSlack {
		dst = make([]byte, 0, n+zstdSlack)
	}
	p, err := d.get().DecodeAll(comp, dst[:0:n+zstdSlack])
	if err != nil {
		return fh, nil, fmt.Errorf("%w: block %d does not decompress: %v", ErrCorrupt, fh.block, err)
	}
	if len(p) != n {
		return fh, nil, fmt.Errorf("%w: block %d decompressed to %d bytes, header says %d", ErrCorrupt, fh.block, len(p), fh.rawLen)
	}
	return fh, p, nil
}

// zstdSlack is the room klauspost/compress's decoder wants past a block
// (its compressedBlockOverAlloc, 32) to copy in wide words.
const zstdSlack = 64

func encoder() *zstd.Encoder {
	zencOnce.Do(func() {
		var err error
		zenc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true),
			zstd.WithWindowSize(1<<20), zstd.WithEncoderCRC(false))
		if err != nil {
			panic(err)
		}
	})
	return zenc
}

func decoder() *zstd.Decoder {
	zdecOnce.Do(func() {
		var err error
		zdec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxMemory(256<<20))
		if err != nil {
			panic(err)
		}
	})
	return zdec
}

// appendFrame compresses payload and appends a whole version 1 frame to
// dst.
func appendFrame(dst []byte, block, events uint32, minT, maxT int64, payload []byte) []byte {
	return appendFrameKeys(dst, block, events, minT, maxT, nil, payload)
}

// appendFrameKeys compresses payload and appends a whole frame to dst: a
// version 2 frame carrying keys (an encoded key section, keys.go) when
// there are any, else a version 1 frame.
func appendFrameKeys(dst []byte, block, events uint32, minT, maxT int64, keys, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, frameHeaderLen)...)
	dst = append(dst, keys...)
	dst = encoder().EncodeAll(payload, dst)
	h := dst[start : start+frameHeaderLen]
	copy(h[0:4], frameMagic[:])
	if len(keys) > 0 {
		h[3] = frameVersionKeys
		h[5], h[6], h[7] = byte(len(keys)), byte(len(keys)>>8), byte(len(keys)>>16)
	}
	h[4] = codecZstd
	binary.LittleEndian.PutUint32(h[8:], block)
	binary.LittleEndian.PutUint32(h[12:], events)
	binary.LittleEndian.PutUint32(h[16:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[20:], uint32(len(dst)-start-frameHeaderLen))
	binary.LittleEndian.PutUint64(h[24:], uint64(minT))
	binary.LittleEndian.PutUint64(h[32:], uint64(maxT))
	crc := crc32.Update(crc32.Checksum(h[:40], castagnoli), castagnoli, dst[start+frameHeaderLen:])
	binary.LittleEndian.PutUint32(h[40:], crc)
	return dst
}

// parseFrameHeader checks the fixed part of a frame header.
func parseFrameHeader(h []byte) (frameHeader, error) {
	var fh frameHeader
	if len(h) < frameHeaderLen {
		return fh, fmt.Errorf("%w: frame header cut short (%d bytes)", ErrCorrupt, len(h))
	}
	if [3]byte(h[0:3]) != [3]byte(frameMagic[:3]) || (h[3] != frameMagic[3] && h[3] != frameVersionKeys) {
		return fh, fmt.Errorf("%w: bad frame magic %q", ErrCorrupt, h[0:4])
	}
	if h[4] != codecZstd {
		return fh, fmt.Errorf("%w: unknown codec %d", ErrCorrupt, h[4])
	}
	fh.block = binary.LittleEndian.Uint32(h[8:])
	fh.events = binary.LittleEndian.Uint32(h[12:])
	fh.rawLen = binary.LittleEndian.Uint32(h[16:])
	fh.compLen = binary.LittleEndian.Uint32(h[20:])
	fh.minT = int64(binary.LittleEndian.Uint64(h[24:]))
	fh.maxT = int64(binary.LittleEndian.Uint64(h[32:]))
	fh.crc = binary.LittleEndian.Uint32(h[40:])
	if fh.rawLen > maxBlockRaw || fh.compLen > maxBlockRaw {
		return fh, fmt.Errorf("%w: frame lengths %d/%d out of range", ErrCorrupt, fh.rawLen, fh.compLen)
	}
	if h[3] == frameVersionKeys {
		fh.keysLen = uint32(h[5]) | uint32(h[6])<<8 | uint32(h[7])<<16
		if fh.keysLen == 0 || fh.keysLen >= fh.compLen {
			return fh, fmt.Errorf("%w: block %d: key section of %d bytes in a frame of %d", ErrCorrupt, fh.block, fh.keysLen, fh.compLen)
		}
	}
	return fh, nil
}

// checkFrame verifies a whole frame (header + payload) against its CRC.
func checkFrame(frame []byte) (frameHeader, error) {
	fh, err := parseFrameHeader(frame)
	if err != nil {
		return fh, err
	}
	if len(frame) != frameHeaderLen+int(fh.compLen) {
		return fh, fmt.Errorf("%w: frame of block %d cut short", ErrCorrupt, fh.block)
	}
	crc := crc32.Update(crc32.Checksum(frame[:40], castagnoli), castagnoli, frame[frameHeaderLen:])
	if crc != fh.crc {
		return fh, fmt.Errorf("%w: block %d checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, fh.block, fh.crc, crc)
	}
	if _, err := frameKeys(frame, fh); err != nil {
		return fh, fmt.Errorf("block %d: %w", fh.block, err)
	}
	return fh, nil
}

// decodeFrame verifies a frame of this peer's journal and returns its
// decompressed payload.
func decodeFrame(frame []byte, dst []byte) (frameHeader, []byte, error) {
	return localFrames.decode(frame, dst)
}

// blockInfo locates one sealed block of a bucket.
type blockInfo struct {
	off      int64 // frame offset in the journal
	frameLen int64
	firstOrd uint32
	events   uint32
	minT     int64
	maxT     int64
	crc      uint32
}

// scanResult is what a journal scan found.
type scanResult struct {
	blocks   []blockInfo
	validLen int64 // bytes of whole, valid frames
	fileLen  int64
	problem  error // why the scan stopped before fileLen (nil when it did not)
}

// scanJournal reads a journal front to back, verifying every frame, and
// stops at the first frame that is cut short or fails its checksum.
func scanJournal(f io.ReaderAt, size int64) scanResult {
	res := scanResult{fileLen: size}
	var off int64
	var ord uint32
	hdr := make([]byte, frameHeaderLen)
	var buf []byte
	for off < size {
		if size-off < frameHeaderLen {
			res.problem = fmt.Errorf("%w: %d trailing bytes at offset %d (torn header)", ErrCorrupt, size-off, off)
			break
		}
		if _, err := f.ReadAt(hdr, off); err != nil {
			res.problem = fmt.Errorf("read journal at %d: %w", off, err)
			break
		}
		fh, err := parseFrameHeader(hdr)
		if err != nil {
			res.problem = fmt.Errorf("offset %d: %w", off, err)
			break
		}
		if fh.block != uint32(len(res.blocks)) {
			res.problem = fmt.Errorf("%w: offset %d holds block %d, want %d", ErrCorrupt, off, fh.block, len(res.blocks))
			break
		}
		flen := int64(frameHeaderLen) + int64(fh.compLen)
		if off+flen > size {
			res.problem = fmt.Errorf("%w: block %d at offset %d cut short (%d of %d bytes)", ErrCorrupt, fh.block, off, size-off, flen)
			break
		}
		if cap(buf) < int(flen) {
			buf = make([]byte, flen)
		}
		buf = buf[:flen]
		if _, err := f.ReadAt(buf, off); err != nil {
			res.problem = fmt.Errorf("read journal at %d: %w", off, err)
			break
		}
		if _, err := checkFrame(buf); err != nil {
			res.problem = fmt.Errorf("offset %d: %w", off, err)
			break
		}
		res.blocks = append(res.blocks, blockInfo{off: off, frameLen: flen, firstOrd: ord, events: fh.events, minT: fh.minT, maxT: fh.maxT, crc: fh.crc})
		ord += fh.events
		off += flen
	}
	res.validLen = off
	return res
}

// readBlock reads and decodes one block of a journal.
func readBlock(f io.ReaderAt, b blockInfo, dst []byte) ([]byte, error) {
	var bb blockBufs
	bb.payload = dst
	return bb.read(f, b)
}

// blockBufs are the buffers one reader of blocks reuses from block to
// block: the compressed frame and its payload. Searches take them from
// blockBufPool, so verifying a phrase over ~7,400 blocks (5M set) does not
// allocate and clear ~130 KiB twice a block (a tenth of its CPU was
// makeslice, memclr and the GC handing pages back).
type blockBufs struct {
	frame   []byte
	payload []byte
}

var blockBufPool = sync.Pool{New: func() any { return new(blockBufs) }}

// read reads and decodes block b; the payload it returns lives in bb until
// the next read.
func (bb *blockBufs) read(f io.ReaderAt, b blockInfo) ([]byte, error) {
	if int64(cap(bb.frame)) < b.frameLen {
		bb.frame = make([]byte, b.frameLen+b.frameLen/4)
	}
	frame := bb.frame[:b.frameLen]
	if _, err := f.ReadAt(frame, b.off); err != nil {
		return nil, fmt.Errorf("read block at %d: %w", b.off, err)
	}
	if fh, err := parseFrameHeader(frame); err == nil {
		// room for this block and most of the next (block sizes vary a
		// little around BlockBytes)
		if n := int(fh.rawLen) + zstdSlack; cap(bb.payload) < n && fh.rawLen <= maxBlockRaw {
			bb.payload = make([]byte, 0, n+n/4)
		}
	}
	fh, p, err := decodeFrame(frame, bb.payload) // p is bb.payload cut to the block: its room stays for the next
	if err != nil {
		return nil, err
	}
	if fh.events != b.events {
		return nil, fmt.Errorf("%w: block at %d holds %d events, want %d", ErrCorrupt, b.off, fh.events, b.events)
	}
	return p, nil
}

// truncateFile cuts a file to length and makes that durable.
func truncateFile(path string, length int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(length); err != nil {
		return fmt.Errorf("truncate %s to %d: %w", path, length, err)
	}
	return f.Sync()
}
