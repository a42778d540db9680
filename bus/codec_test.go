package bus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// block is a hot-path message with its own binary layout:
// [version 1][seq u64][data…].
type block struct {
	Seq  uint64
	Data []byte
}

func (b block) MarshalBinary() ([]byte, error) {
	out := make([]byte, 9+len(b.Data))
	out[0] = 1
	binary.BigEndian.PutUint64(out[1:9], b.Seq)
	copy(out[9:], b.Data)
	return out, nil
}

func (block) BinaryCodec() {}

func (b *block) UnmarshalBinary(p []byte) error {
	if len(p) < 9 || p[0] != 1 {
		return fmt.Errorf("block: bad header (%d bytes)", len(p))
	}
	b.Seq, b.Data = binary.BigEndian.Uint64(p[1:9]), p[9:]
	return nil
}

type blockAck struct {
	Seq uint64 `json:"seq"`
}

func TestCodecs(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1"})
	srv := mustConnect(t, s.ClientURL(), ConnectOptions{})
	cli := mustConnect(t, s.ClientURL(), ConnectOptions{})

	// bin/1 request, json/1 reply.
	mustServe(t, srv, "quarry.repl.site1.p2", ServeOptions{}, func(ctx context.Context, b block) (blockAck, error) {
		if !bytes.Equal(b.Data, bytes.Repeat([]byte{7}, 1000)) {
			return blockAck{}, Errorf(CodeBadRequest, "block %d corrupt", b.Seq)
		}
		return blockAck{Seq: b.Seq}, nil
	})
	ack, err := Request[block, blockAck](ctxTimeout(t, 2*time.Second), cli, "quarry.repl.site1.p2", block{Seq: 42, Data: bytes.Repeat([]byte{7}, 1000)})
	if err != nil || ack.Seq != 42 {
		t.Fatalf("binary block: %+v, %v", ack, err)
	}
	m, _ := Encode("x", block{Seq: 1, Data: []byte("abc")})
	if m.Header.Get(HeaderCodec) != CodecBin1 || len(m.Data) != 12 {
		t.Fatalf("block encoded as %s in %d bytes, want bin/1 in 12", m.Header.Get(HeaderCodec), len(m.Data))
	}
	// Embedding a MarshalBinary (time.Time) does not switch to bin/1.
	type stamped struct {
		time.Time
		Name string `json:"name"`
	}
	m, _ = Encode("x", stamped{Time: time.Unix(0, 0).UTC(), Name: "n"})
	if m.Header.Get(HeaderCodec) != CodecJSON1 {
		t.Fatalf("struct embedding time.Time encoded as %s", m.Header.Get(HeaderCodec))
	}

	// raw/1 both ways.
	mustServe(t, srv, "quarry.bundle.h1", ServeOptions{}, func(ctx context.Context, b []byte) ([]byte, error) {
		return append([]byte("bundle:"), b...), nil
	})
	raw, err := Request[[]byte, []byte](ctxTimeout(t, 2*time.Second), cli, "quarry.bundle.h1", []byte{0, 1, 2})
	if err != nil || !bytes.Equal(raw, []byte("bundle:\x00\x01\x02")) {
		t.Fatalf("raw: %q, %v", raw, err)
	}

	// A codec the target type cannot take is refused, clearly.
	bad := nats.NewMsg("x")
	bad.Header.Set(HeaderCodec, CodecBin1)
	var ackOut blockAck
	if err := Decode(bad, &ackOut); !errors.Is(err, ErrCodec) {
		t.Fatalf("bin/1 into a JSON type: %v, want ErrCodec", err)
	}
	bad.Header.Set(HeaderCodec, CodecRaw1)
	if err := Decode(bad, &ackOut); !errors.Is(err, ErrCodec) {
		t.Fatalf("raw/1 into a struct: %v, want ErrCodec", err)
	}
	bad.Header.Set(HeaderCodec, "")
	if err := Decode(bad, &ackOut); !errors.Is(err, ErrCodec) {
		t.Fatalf("no codec: %v, want ErrCodec", err)
	}
	// A malformed binary body is a codec error the handler never sees.
	bad = nats.NewMsg("quarry.repl.site1.p2")
	bad.Header.Set(HeaderCodec, CodecBin1)
	bad.Data = []byte{9}
	reply, err := cli.RequestMsg(bad, 2*time.Second)
	if err != nil || reply.Header.Get(HeaderErrorCode) != CodeBadRequest {
		t.Fatalf("malformed block: %v, %v", reply, err)
	}
}

func FuzzDecodeJSONAndBinary(f *testing.F) {
	f.Add([]byte(`{"seq":1}`), true)
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 5, 'x'}, false)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool) {
		m := nats.NewMsg("quarry.repl.s.p")
		if asJSON {
			m.Header.Set(HeaderCodec, CodecJSON1)
			var a blockAck
			if err := Decode(m, &a); err != nil && !errors.Is(err, ErrCodec) {
				t.Fatalf("unclassified %v", err)
			}
			m.Data = body
			if err := Decode(m, &a); err != nil && !errors.Is(err, ErrCodec) {
				t.Fatalf("unclassified %v", err)
			}
			return
		}
		m.Header.Set(HeaderCodec, CodecBin1)
		m.Data = body
		var b block
		if err := Decode(m, &b); err != nil {
			if !errors.Is(err, ErrCodec) {
				t.Fatalf("unclassified %v", err)
			}
			return
		}
		again, _ := b.MarshalBinary()
		if !bytes.Equal(again, body) {
			t.Fatalf("round trip %x → %x", body, again)
		}
	})
}
