package repl

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Requests and replies travel as bin/1 (bus.BinaryMessage): a
// uvarint-prefixed JSON header (every field but the frames), then a uvarint
// frame count and each frame uvarint-prefixed, raw. Frames are the bulk of
// the bytes and are already compressed and checksummed; base64 in JSON would
// add a third.

// ErrFormat is returned for a message that does not decode.
var ErrFormat = errors.New("bad replication message")

// MaxFrames bounds the frames of one message.
const MaxFrames = 1 << 16

func (Request) BinaryCodec() {}
func (Reply) BinaryCodec()   {}

func (r Request) MarshalBinary() ([]byte, error) {
	frames := r.Frames
	r.Frames = nil
	return marshal(r, frames)
}

func (r *Request) UnmarshalBinary(b []byte) error {
	var x Request
	frames, err := unmarshal(b, &x)
	if err != nil {
		return err
	}
	x.Frames = frames
	*r = x
	return nil
}

func (r Reply) MarshalBinary() ([]byte, error) {
	frames := r.Frames
	r.Frames = nil
	return marshal(r, frames)
}

func (r *Reply) UnmarshalBinary(b []byte) error {
	var x Reply
	frames, err := unmarshal(b, &x)
	if err != nil {
		return err
	}
	x.Frames = frames
	*r = x
	return nil
}

func marshal(hdr any, frames [][]byte) ([]byte, error) {
	h, err := json.Marshal(hdr)
	if err != nil {
		return nil, err
	}
	size := len(h) + 20
	for _, f := range frames {
		size += len(f) + 10
	}
	out := make([]byte, 0, size)
	out = binary.AppendUvarint(out, uint64(len(h)))
	out = append(out, h...)
	out = binary.AppendUvarint(out, uint64(len(frames)))
	for _, f := range frames {
		out = binary.AppendUvarint(out, uint64(len(f)))
		out = append(out, f...)
	}
	return out, nil
}

func unmarshal(b []byte, hdr any) ([][]byte, error) {
	next := func(what string) (int, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > uint64(len(b)-n) && what != "count" {
			return 0, fmt.Errorf("%w: %s cut short", ErrFormat, what)
		}
		b = b[n:]
		return int(v), nil
	}
	hl, err := next("header")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b[:hl], hdr); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	b = b[hl:]
	count, err := next("count")
	if err != nil {
		return nil, err
	}
	if count > MaxFrames || count > len(b) {
		return nil, fmt.Errorf("%w: %d frames in %d bytes", ErrFormat, count, len(b))
	}
	var frames [][]byte
	for i := 0; i < count; i++ {
		fl, err := next("frame")
		if err != nil {
			return nil, err
		}
		frames = append(frames, b[:fl:fl])
		b = b[fl:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrFormat, len(b))
	}
	return frames, nil
}
