package hec

// Ack channels, the ack endpoint, health and OPTIONS (SPEC §4): a token's
// channels and their unread acks, as Splunk keeps them.

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

func serveOptions(w http.ResponseWriter, r *http.Request) {
	allow := "POST, OPTIONS"
	if strings.Contains(r.URL.Path, "/health") {
		allow = "GET, OPTIONS"
	}
	w.Header().Set("Allow", allow)
	w.WriteHeader(http.StatusOK)
}

// channel returns (creating) one of a token's ack channels, enforcing the
// token's bounds.
func (h *Handler) channel(t *tokenState, id string) (*channel, *Reply) {
	now := h.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending.Load() >= h.cfg.MaxTotalPendingAcks {
		rp := plain(replyBusy)
		return nil, &rp
	}
	c := t.channels[id]
	if c == nil {
		if len(t.channels) >= h.cfg.MaxChannels || len(t.channels)%1024 == 1023 {
			// forget idle channels (and their unread acks), as Splunk does
			for k, old := range t.channels {
				old.mu.Lock()
				idle := now.Sub(old.lastUsed) > h.cfg.ChannelIdle
				n := len(old.pending)
				old.mu.Unlock()
				if idle {
					old.mu.Lock()
					old.gone = true
					old.mu.Unlock()
					delete(t.channels, k)
					t.pending.Add(-int64(n))
				}
			}
			if len(t.channels) >= h.cfg.MaxChannels {
				rp := plain(replyBusy)
				return nil, &rp
			}
		}
		c = &channel{pending: map[int64]pendingAck{}, lastUsed: now, owner: t.tokenChannels}
		t.channels[id] = c
	}
	c.mu.Lock()
	full := len(c.pending) >= h.cfg.MaxPendingAcks
	c.mu.Unlock()
	if full {
		rp := plain(replyBusy)
		return nil, &rp
	}
	return c, nil
}

func (h *Handler) serveAck(w http.ResponseWriter, r *http.Request) {
	t, rp := h.auth(r)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	if !t.Ack {
		h.reply(w, plain(replyAckDisabled))
		return
	}
	chID, rp := channelOf(r, true)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	// A small body of at most MaxAckIDs ids, counted before it is parsed;
	// beyond either bound nothing is read, so no ack is forgotten.
	b, rp := h.readBody(w, r, t, h.cfg.MaxAckBodyBytes)
	if rp != nil {
		h.reply(w, *rp)
		return
	}
	defer b.release()
	if _, bad := envelopeValues(b.data, h.cfg.MaxAckIDs+2); bad >= 0 { // {"acks":[…]} holds ids+2 values
		h.reply(w, plain(replyTooLarge))
		return
	}
	var req struct {
		Acks []int64 `json:"acks"`
	}
	if json.Unmarshal(b.data, &req) != nil || req.Acks == nil {
		h.reply(w, plain(replyInvalidFormat))
		return
	}
	if len(req.Acks) > h.cfg.MaxAckIDs {
		h.reply(w, plain(replyTooLarge))
		return
	}
	t.mu.Lock()
	c := t.channels[chID] // only this token's channels: another's are invisible
	t.mu.Unlock()
	out := make(map[string]bool, len(req.Acks))
	for _, id := range req.Acks {
		done := false
		if c != nil {
			c.mu.Lock()
			if a, ok := c.pending[id]; ok && a.ack.Durable() {
				done = true
				delete(c.pending, id) // read as true once, then forgotten
				t.pending.Add(-1)
			}
			c.lastUsed = h.cfg.Now()
			c.mu.Unlock()
		}
		out[strconv.FormatInt(id, 10)] = done
	}
	h.requests.WithLabelValues("0").Inc()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"acks": out})
}

func (h *Handler) serveHealth(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Store.Busy() || h.cfg.Store.Err() != nil {
		h.reply(w, plain(replyUnhealthy))
		return
	}
	h.reply(w, plain(replyHealthy))
}
