package searchhead

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/query"
)

// publisher sends a search's results to <prefix>.results.<name> (SPEC §5,
// §6): NDJSON batches (each message a run of result lines, at most
// publishBatchBytes), then one message holding {"summary": …}. Core NATS,
// no persistence: a subscriber that joins late gets nothing stale, and
// the stock client consumes it with `nats sub 'quarry.results.>'`.
// Messages are plain payloads (no quarry codec header) so any client reads
// them as text.
type publisher struct {
	h       *Head
	subject string
	// slot, when set, is the Quarry-Slot header of every message (a saved
	// search's run, scheduler.go).
	slot    string
	buf     bytes.Buffer
	err     error
	sent    int // rows in messages published
	pending int // rows in buf
}

func (h *Head) publisher(name, slot string) *publisher {
	if name == "" {
		return &publisher{}
	}
	subj, _ := h.subj.Results(name) // validated before the search started
	return &publisher{h: h, subject: subj, slot: slot}
}

// publish sends one message, with the slot header when set.
func (p *publisher) publish(data []byte) error {
	if p.slot == "" {
		return p.h.nc.Publish(p.subject, data)
	}
	m := nats.NewMsg(p.subject)
	m.Header.Set(api.SlotHeader, p.slot)
	m.Data = data
	return p.h.nc.PublishMsg(m)
}

func (p *publisher) rows(rows []map[string]any) {
	if p.subject == "" || p.err != nil {
		return
	}
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			continue
		}
		if p.buf.Len() > 0 && p.buf.Len()+len(line)+1 > publishBatchBytes {
			p.flush()
		}
		p.buf.Write(line)
		p.buf.WriteByte('\n')
		p.pending++
	}
}

func (p *publisher) flush() {
	if p.buf.Len() == 0 || p.err != nil {
		return
	}
	if err := p.publish(append([]byte(nil), p.buf.Bytes()...)); err != nil {
		p.err = err
		p.h.log.Warn("publish results", "subject", p.subject, "err", err)
	} else {
		p.sent += p.pending
	}
	p.buf.Reset()
	p.pending = 0
}

// warning is the summary warning of a publish that failed (nil: none):
// the rows after the failure were not published, and the subscribers must
// not take what they got for the whole answer (security review L2: it
// used to be dropped silently under a complete-looking summary).
func (p *publisher) warning() string {
	if p.subject == "" {
		return ""
	}
	p.flush()
	if p.err == nil {
		return ""
	}
	return fmt.Sprintf("publishing to %s failed after %d rows (%v): subscribers got an incomplete answer; the HTTP answer is whole", p.subject, p.sent, p.err)
}

func (p *publisher) summary(s query.Summary) {
	if p.subject == "" {
		return
	}
	p.flush()
	b, _ := json.Marshal(map[string]any{"summary": s})
	if err := p.publish(b); err != nil {
		p.h.log.Warn("publish summary", "subject", p.subject, "err", err)
	}
	_ = p.h.nc.Flush()
}
