package hec

import (
	"bytes"
	"net/http"
	"time"

	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/peer/store"
)

// Index-time rules (SPEC §5, issue 28): the configuration bundle's
// props.conf settings, parsed by package knowledge, decide how a /raw body
// breaks into events and where each event's time comes from. A body whose
// sourcetype, source and host match no stanza and no built-in sourcetype
// keeps HEC's plain rule: one event per line, stamped with the time the
// request arrived. /event takes an event's time from its "time" key, and
// from its text only with ?auto_extract_timestamp=true (then the text's
// timestamp wins over "time", as for Splunk users who send a shipper's
// receive time there; neither: arrival).

// SetIndexRules puts a bundle's index-time rules in force for the requests
// that start from now on (nil: the built-in sourcetypes only).
func (h *Handler) SetIndexRules(r *knowledge.IndexRules) { h.rules.Store(r) }

// IndexRulesHash is the hash of the bundle whose rules are in force, ""
// for the built-ins only.
func (h *Handler) IndexRulesHash() string {
	if r := h.rules.Load(); r != nil {
		return r.Hash()
	}
	return ""
}

// replyError carries a Reply out of a knowledge.Rule.Events callback.
type replyError struct{ Reply }

func (e *replyError) Error() string { return e.Text }

func (h *Handler) serveRaw(w http.ResponseWriter, r *http.Request) {
	t, ch, key, b, ok := h.begin(w, r)
	if !ok {
		return
	}
	def, rp := h.defaults(r, t, h.cfg.Now().UnixNano())
	if rp != nil {
		b.release()
		h.reply(w, *rp)
		return
	}
	if !store.ValidIndexName(def.Index) || !t.allows(def.Index) {
		b.release()
		h.reply(w, plain(replyIncorrectIdx))
		return
	}
	if key != nil {
		key.hashBody("raw", r.URL.Query(), b.data)
	}
	// The body buffer is owned by the request until the store lets go; so
	// are the events, reserved as their slice grows (a body of short lines
	// costs more in events than in bytes).
	var evs []store.Event
	host, src, st := []byte(def.Host), []byte(def.Source), []byte(def.Sourcetype)
	meta := len(host) + len(src) + len(st) + len(def.Index)
	rule := h.rules.Load().For(def.Sourcetype, def.Source, def.Host)
	arrived := time.Unix(0, def.Now)
	add := func(raw []byte) error {
		if len(raw)+meta > h.cfg.MaxEventBytes {
			return &replyError{replyInvalidFormat.at(len(evs))}
		}
		if len(evs) == cap(evs) {
			grown := max(64, 2*cap(evs))
			if rp := b.rv.take(int64(grown-cap(evs)) * eventBytes); rp != nil {
				return &replyError{*rp}
			}
			evs = append(make([]store.Event, 0, grown), evs...)
		}
		ts := def.Now
		if rule != nil {
			if at, ok := rule.Time(raw, arrived); ok {
				ts = at.UnixNano()
			}
		}
		evs = append(evs, store.Event{Index: def.Index, Time: ts, Raw: raw, Host: host, Source: src, Sourcetype: st})
		return nil
	}
	var err error
	if rule != nil {
		err = rule.Events(b.data, add)
	} else {
		err = eachLine(b.data, add)
	}
	if err != nil {
		b.release()
		h.reply(w, err.(*replyError).Reply)
		return
	}
	if len(evs) == 0 {
		b.release()
		h.reply(w, plain(replyNoData))
		return
	}
	if key != nil {
		h.commitKeyed(w, r, t, ch, evs, b.release, key)
		return
	}
	h.commit(w, r, t, ch, evs, b.release)
}

// eachLine is HEC's plain /raw rule: one event per non-blank line, a
// trailing \r dropped.
func eachLine(body []byte, emit func([]byte) error) error {
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		line = bytes.TrimRight(line, "\r")
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := emit(line); err != nil {
			return err
		}
	}
	return nil
}

// extractTimes sets each event's time from its text by its rule (the
// default rule where no stanza applies), for /event with
// ?auto_extract_timestamp=true; an event whose text holds no timestamp
// keeps the time it had.
func (h *Handler) extractTimes(evs []store.Event, arrived time.Time) {
	rules := h.rules.Load()
	for i := range evs {
		e := &evs[i]
		rule := rules.For(string(e.Sourcetype), string(e.Source), string(e.Host))
		if rule == nil {
			rule = knowledge.DefaultRule()
		}
		if at, ok := rule.Time(e.Raw, arrived); ok {
			e.Time = at.UnixNano()
		}
	}
}
