package hec

import "time"

// Sweep forgets, over every token, the channels with no request for
// ChannelIdle (with their unread acks) and the ack ids unread for
// AckIdle, as of the handler's clock; it returns how many of each it
// forgot. Before it ran on a timer, idle channels were only forgotten when
// a token created a new channel, and unread acks never: a shipper that
// never reads acks on one fixed channel got 503 code 9 for ever once
// MaxPendingAcks were unread (review 2026-12-06, the stuck channel).
func (h *Handler) Sweep() (channels, acks int) {
	now := h.cfg.Now()
	tm := h.tokens.Load()
	if tm == nil {
		return 0, 0
	}
	seen := map[*tokenChannels]bool{}
	for _, t := range tm.byKey {
		if seen[t.tokenChannels] {
			continue
		}
		seen[t.tokenChannels] = true
		c, a := h.sweepToken(t.tokenChannels, now)
		channels += c
		acks += a
	}
	h.expired.WithLabelValues("channel").Add(float64(channels))
	h.expired.WithLabelValues("ack").Add(float64(acks))
	return channels, acks
}

func (h *Handler) sweepToken(t *tokenChannels, now time.Time) (channels, acks int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, c := range t.channels {
		c.mu.Lock()
		if now.Sub(c.lastUsed) > h.cfg.ChannelIdle {
			c.gone = true
			n := len(c.pending)
			c.pending = map[int64]pendingAck{}
			t.pending.Add(-int64(n))
			delete(t.channels, id)
			channels++
			acks += n
		} else {
			for aid, a := range c.pending {
				if now.Sub(a.at) > h.cfg.AckIdle {
					delete(c.pending, aid)
					t.pending.Add(-1)
					acks++
				}
			}
		}
		c.mu.Unlock()
	}
	return channels, acks
}

// RunSweeper calls Sweep every interval (a quarter of the shorter of
// ChannelIdle and AckIdle, at least a second) until stop is closed.
func (h *Handler) RunSweeper(stop <-chan struct{}) {
	every := max(min(h.cfg.ChannelIdle, h.cfg.AckIdle)/4, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			h.Sweep()
		}
	}
}
