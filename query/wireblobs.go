package query

import (
	"encoding/binary"
	"fmt"
)

// Partials with their byte fields after the JSON (issue 27). A front-coded
// set, packed values or front-coded counts are bytes; inside JSON they are
// base64 strings the peer encodes and the head scans, unquotes and decodes
// (a 340 kB set of client addresses: ~1.5 ms at the head). For a head that
// reads framed messages (api.SearchRequest.Framed, Plan.SetBlobs) a partial
// with such fields is written as
//
//	0x02, uvarint length of the JSON, the JSON, the blobs
//
// where each byte field is left out of the JSON and named by its place in
// the blobs instead ([offset, length]: `counts.bx`, a state's `sbx` and
// `nbx`). A JSON partial never begins with 0x02.
const partialBlobs = 0x02

// blobRef is a byte field's place in the blobs: offset and length.
type blobRef = [2]int

// blobWriter collects the blobs of one partial.
type blobWriter struct{ b []byte }

func (w *blobWriter) put(x []byte) *blobRef {
	ref := &blobRef{len(w.b), len(x)}
	w.b = append(w.b, x...)
	return ref
}

// moveToBlobs moves w's byte fields to blobs. w's counts and the states
// holding bytes are copies (encode, compactStates), never the partial's.
func moveToBlobs(w *wirePartial, bw *blobWriter) {
	if c := w.Counts; c != nil && c.B != nil {
		cc := *c
		cc.BX, cc.B = bw.put(c.B), nil
		w.Counts = &cc
	}
	for i := range w.Groups {
		for j, st := range w.Groups[i].States {
			if st == nil || (st.SB == nil && st.NB == nil) {
				continue
			}
			c := *st
			if c.SB != nil {
				c.SBX, c.SB = bw.put(c.SB), nil
			}
			if c.NB != nil {
				c.NBX, c.NB = bw.put(c.NB), nil
			}
			w.Groups[i].States[j] = &c
		}
	}
}

// splitBlobs splits a partial written with blobs into its JSON and blobs;
// any other partial is all JSON.
func splitBlobs(b []byte) (js, blobs []byte, err error) {
	if len(b) == 0 || b[0] != partialBlobs {
		return b, nil, nil
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return nil, nil, fmt.Errorf("decode partial: malformed blobs header")
	}
	return b[1+k : 1+k+int(n)], b[1+k+int(n):], nil
}

// takeBlobs puts the blobs back in the byte fields they were moved from;
// a place outside the blobs, or a field both in the JSON and in the blobs,
// is an error.
func takeBlobs(p *Partial, blobs []byte) error {
	get := func(ref *blobRef, have []byte) ([]byte, error) {
		if have != nil {
			return nil, fmt.Errorf("a field both in the JSON and in the blobs")
		}
		o, l := ref[0], ref[1]
		if o < 0 || l < 0 || o > len(blobs) || l > len(blobs)-o {
			return nil, fmt.Errorf("a blob at %d of %d bytes, past the %d bytes of blobs", o, l, len(blobs))
		}
		return blobs[o : o+l : o+l], nil
	}
	var err error
	if c := p.Counts; c != nil && c.BX != nil {
		if c.B, err = get(c.BX, c.B); err != nil {
			return err
		}
		c.BX = nil
	}
	for _, g := range p.Groups {
		for _, st := range g.States {
			if st == nil {
				continue
			}
			if st.SBX != nil {
				if st.SB, err = get(st.SBX, st.SB); err != nil {
					return err
				}
				st.SBX = nil
			}
			if st.NBX != nil {
				if st.NB, err = get(st.NBX, st.NB); err != nil {
					return err
				}
				st.NBX = nil
			}
		}
	}
	return nil
}
