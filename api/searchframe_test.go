package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestSearchFrame: a message reads back the same in both forms; the framed
// form carries the partial's bytes untouched, outside the header; a
// malformed frame is refused.
func TestSearchFrame(t *testing.T) {
	partial := []byte(`{"v":2,"kind":"agg","groups":[{"k":[],"s":[{"sb":"AAFh"}]}]}`)
	msgs := []SearchMsg{
		{Kind: SearchBatch, Peer: "p1", Buckets: []string{"main~1~G", "main~2~G"}, Partial: partial},
		{Kind: SearchMarker, Peer: "p1", Bucket: "main~1~G", Outcome: MarkerSearched, Scanned: 7, Length: &CopyLength{Blocks: 3, Checksum: "c9"}},
		{Kind: SearchDone, Peer: "p1", TableVersion: 4, Done: 2},
		{Kind: SearchMarkers, Peer: "p1", Markers: []SearchMsg{{Kind: SearchMarker, Bucket: "b1", Outcome: MarkerSkipped}, {Kind: SearchMarker, Bucket: "b2", Outcome: MarkerSearched, Batches: new(int)}}},
	}
	for _, m := range msgs {
		for _, framed := range []bool{false, true} {
			b, err := EncodeSearchMsg(m, framed)
			if err != nil {
				t.Fatal(err)
			}
			if framed != (b[0] == searchFrame) {
				t.Fatalf("framed %v: %q", framed, b)
			}
			if framed && m.Partial != nil && !bytes.HasSuffix(b, partial) {
				t.Fatalf("the partial is not carried as it is: %q", b)
			}
			got, err := DecodeSearchMsg(b)
			if err != nil {
				t.Fatalf("framed %v: %v", framed, err)
			}
			want, _ := json.Marshal(m)
			again, _ := json.Marshal(got)
			if !bytes.Equal(want, again) {
				t.Fatalf("framed %v: sent %s, read %s", framed, want, again)
			}
		}
	}
	hdr := []byte(`{"kind":"batch","peer":"p1"}`)
	for name, b := range map[string][]byte{
		"no header length":    {searchFrame},
		"header past the end": append([]byte{searchFrame, 200}, hdr...),
		"header not JSON":     append([]byte{searchFrame, 3}, "{x}"...),
		"partial twice":       append(append([]byte{searchFrame, byte(len(`{"kind":"batch","partial":{}}`))}, `{"kind":"batch","partial":{}}`...), "{}"...),
		"huge header length":  {searchFrame, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"a batch in a list":   []byte(`{"kind":"markers","markers":[{"kind":"batch","bucket":"b"}]}`),
		"a list in a list":    []byte(`{"kind":"markers","markers":[{"kind":"marker","markers":[{"kind":"marker"}]}]}`),
		"a list on a marker":  []byte(`{"kind":"marker","markers":[{"kind":"marker"}]}`),
	} {
		if m, err := DecodeSearchMsg(b); err == nil {
			t.Errorf("%s: decoded %+v", name, m)
		}
	}
	// A framed message without a partial has none.
	b, _ := EncodeSearchMsg(SearchMsg{Kind: SearchMarker, Bucket: "b"}, true)
	if m, err := DecodeSearchMsg(b); err != nil || m.Partial != nil || !reflect.DeepEqual(m, SearchMsg{Kind: SearchMarker, Bucket: "b"}) {
		t.Fatalf("%+v %v", m, err)
	}
}

// FuzzSearchMsg: any bytes a head reads from a stream decode to a message
// or an error, never a panic; what decodes encodes again, in both forms,
// to a message that decodes the same.
func FuzzSearchMsg(f *testing.F) {
	for _, m := range []SearchMsg{
		{Kind: SearchBatch, Peer: "p1", Bucket: "main~1~G", Partial: []byte(`{"v":2,"kind":"agg"}`)},
		{Kind: SearchMarker, Bucket: "b", Outcome: MarkerSkipped},
	} {
		for _, framed := range []bool{false, true} {
			b, _ := EncodeSearchMsg(m, framed)
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeSearchMsg(b)
		if err != nil {
			return
		}
		if m.Partial != nil && !json.Valid(m.Partial) {
			return // a framed partial is checked by query.DecodePartial
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("%+v does not encode: %v", m, err)
		}
		for _, framed := range []bool{false, true} {
			e, err := EncodeSearchMsg(m, framed)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeSearchMsg(e)
			if err != nil {
				t.Fatalf("framed %v: its own encoding %q does not decode: %v", framed, e, err)
			}
			again, _ := json.Marshal(got)
			if !bytes.Equal(want, again) {
				t.Fatalf("framed %v: %s read back as %s", framed, want, again)
			}
		}
	})
}
