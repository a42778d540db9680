package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

type searchReq struct {
	Query string `json:"query"`
	Inbox string `json:"inbox"`
}

func TestCollectorFansInOneStreamPerPeer(t *testing.T) {
	s := mustStartServer(t, ServerConfig{Name: "n1", Site: "site1", Users: []User{
		{Name: "sh", Password: "x", Role: RoleSearchHead},
		{Name: "peer", Password: "y", Role: RolePeer},
	}})
	const peers, batches = 5, 40
	for i := range peers {
		name := fmt.Sprintf("p%d", i+1)
		nc := mustConnect(t, s.ClientURL(), ConnectOptions{Name: name, User: "peer", Password: "y"})
		_, err := nc.Subscribe("quarry.search.site1", func(m *nats.Msg) {
			var req searchReq
			if err := Decode(m, &req); err != nil {
				t.Error(err)
				return
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				snd, err := JoinCollector(ctx, nc, req.Inbox, name)
				if err != nil {
					t.Error(err)
					return
				}
				for b := range batches {
					if err := snd.Send(ctx, []byte(fmt.Sprintf("%s batch %d for %s", name, b, req.Query))); err != nil {
						t.Error(err)
						return
					}
				}
				if err := snd.Close(ctx); err != nil {
					t.Error(err)
				}
			}()
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
	}

	sh := mustConnect(t, s.ClientURL(), ConnectOptions{User: "sh", Password: "x"})
	col, err := NewCollector(sh, StreamOptions{Window: 2, ChunkSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	if err := Publish(sh, "quarry.search.site1", searchReq{Query: "error", Inbox: col.Inbox()}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	var from []string
	for range peers {
		name, r, err := col.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		from = append(from, name)
		for b := 0; ; b++ {
			msg, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				if b != batches {
					t.Fatalf("%s sent %d batches, want %d", name, b, batches)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%s batch %d for error", name, b); string(msg) != want {
				t.Fatalf("got %q, want %q", msg, want)
			}
		}
		if mb := r.MaxBuffered(); mb > 2 {
			t.Fatalf("%s: %d batches buffered with a window of 2", name, mb)
		}
		if err := r.Close(nil); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(from)
	if fmt.Sprint(from) != "[p1 p2 p3 p4 p5]" {
		t.Fatalf("streams from %v", from)
	}

	col.Close()
	if _, _, err := col.Accept(ctx); !errors.Is(err, ErrCollectorClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	if _, err := JoinCollector(ctxTimeout(t, 300*time.Millisecond), sh, col.Inbox(), "late"); !errors.Is(err, ErrNoResponders) {
		t.Fatalf("join after close: %v, want ErrNoResponders", err)
	}
}
