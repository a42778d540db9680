package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/query"
)

// messageTypes makes a fresh value of every message type that crosses the
// bus between peers, search heads and managers (SPEC §6).
var messageTypes = []func() any{
	func() any { return new(Register) }, func() any { return new(RegisterReply) },
	func() any { return new(Heartbeat) }, func() any { return new(HeartbeatReply) },
	func() any { return new(TargetsRequest) }, func() any { return new(TargetsReply) },
	func() any { return new(BucketEvent) }, func() any { return new(BucketEventReply) },
	func() any { return new(GenerationRequest) }, func() any { return new(GenerationReply) },
	func() any { return new(ConfigRequest) }, func() any { return new(PeerConfig) },
	func() any { return new(Notice) }, func() any { return new(FixupTask) },
	func() any { return new(FixupAck) }, func() any { return new(FixupResult) },
	func() any { return new(FixupResultReply) }, func() any { return new(ConfirmRequest) },
	func() any { return new(ConfirmReply) }, func() any { return new(SearchRequest) },
	func() any { return new(SearchMsg) },
}

// FuzzMessages feeds arbitrary bodies to the decoder of every message type,
// as a receiver on the bus decodes them (bus.Decode, json/1). A body is
// refused with an error or decoded; a decoded message that its receiver
// validates (Register, SearchRequest) is refused or accepted without a
// panic, an accepted search request's query compiles or is refused, and
// every decoded message encodes again and decodes to the same encoding
// (one protocol, written once: no message that one end reads and the
// other cannot write).
func FuzzMessages(f *testing.F) {
	seeds := []string{
		`{"v":1,"peer":"p1","guid":"g","site":"site1","inventory":[{"bucket":"main~1~g","state":"warm","searchable":true}]}`,
		`{"v":1,"peer":"p1","stats":{"copies":3},"disk_free":12345}`,
		`{"v":1,"id":"sh1-1","head":"sh1","query":"error | stats count by host","now_ns":1,"generation":4,"table_version":9,"table_site":"site1","invites":{"p1":{"v":1,"inbox":"_INBOX.x","window":8,"chunk_size":65536,"heartbeat_ms":100,"idle_ms":1000}}}`,
		`{"v":1,"id":"s","query":"x","buckets":["main~1~G","a~b"],"invites":{"p":{}}}`,
		`{"kind":"batch","peer":"p1","bucket":"main~1~G","partial":{"v":2,"kind":"agg"}}`,
		`{"id":7,"kind":"replicate","bucket":"main~1~G","source":"p1","target":"p2"}`,
		`{"kind":"gen","generation":3,"version":5}`,
		`null`, `[]`, `{"inventory":null}`,
	}
	for i, s := range seeds {
		for j := range messageTypes {
			if j%4 == i%4 {
				f.Add([]byte(s), uint8(j))
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		mk := messageTypes[int(which)%len(messageTypes)]
		v := mk()
		m := nats.NewMsg("quarry.fuzz")
		m.Header.Set(bus.HeaderCodec, bus.CodecJSON1)
		m.Data = body
		if bus.Decode(m, v) != nil {
			return
		}
		switch x := v.(type) {
		case *Register:
			_ = x.Validate()
		case *SearchRequest:
			if x.Validate() == nil {
				_, _ = query.Compile(query.Request{Query: x.Query, Earliest: x.Earliest, Latest: x.Latest, Now: time.Unix(0, x.NowNS)})
			}
		}
		m1, err := bus.Encode("quarry.fuzz", v)
		if err != nil {
			t.Fatalf("%T decoded from %q does not encode: %v", v, body, err)
		}
		w := mk()
		if err := bus.Decode(m1, w); err != nil {
			t.Fatalf("%T: its own encoding %q does not decode: %v", v, m1.Data, err)
		}
		m2, err := bus.Encode("quarry.fuzz", w)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m1.Data, m2.Data) && !sameJSON(m1.Data, m2.Data) {
			t.Fatalf("%T does not round-trip:\n %s\n %s", v, m1.Data, m2.Data)
		}
	})
}

func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return bytes.Equal(ja, jb)
}
