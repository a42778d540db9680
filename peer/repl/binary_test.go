package repl

import (
	"errors"
	"reflect"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := Request{V: Version, Op: OpBlocks, Bucket: "main~1~G", Index: "main", Origin: "p1", Searchable: true, First: 7,
		Frames: [][]byte{[]byte("QJB\x01abc"), {}, []byte("x")}}
	b, err := in.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var out Request
	if err := out.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("got %+v, want %+v", out, in)
	}
	for cut := 0; cut < len(b); cut++ {
		if err := new(Request).UnmarshalBinary(b[:cut]); !errors.Is(err, ErrFormat) {
			t.Fatalf("cut at %d: %v, want ErrFormat", cut, err)
		}
	}
	rep := Reply{Bucket: "b", Blocks: 3, State: "hot", Frames: [][]byte{[]byte("f")}}
	rb, _ := rep.MarshalBinary()
	var rout Reply
	if err := rout.UnmarshalBinary(rb); err != nil || !reflect.DeepEqual(rep, rout) {
		t.Fatalf("reply: %+v, %v", rout, err)
	}
}

// FuzzUnmarshal: any bytes decode or are refused with ErrFormat; what
// decodes encodes back to a message that decodes the same.
func FuzzUnmarshal(f *testing.F) {
	b, _ := Request{V: 1, Op: OpBlocks, Bucket: "x", Frames: [][]byte{[]byte("abc")}}.MarshalBinary()
	f.Add(b)
	f.Add([]byte{0})
	f.Add([]byte{2, '{', '}', 1, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if err := r.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error without ErrFormat: %v", err)
			}
			return
		}
		again, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var r2 Request
		if err := r2.UnmarshalBinary(again); err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-decode: %+v vs %+v (%v)", r2, r, err)
		}
	})
}
