package api

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// A batch's partial can be hundreds of kilobytes (a dc set of 40k client
// addresses is 340 kB). Inside the message's JSON it was scanned three
// more times than needed: compacted by the peer's encoder, validated and
// skipped by the head's decoder. A head that asks for it
// (SearchRequest.Framed) gets every message framed instead:
//
//	0x01, uvarint length of the header, the header (the message's JSON
//	without its partial), the partial's bytes as they are
//
// A JSON message never begins with 0x01, so DecodeSearchMsg reads both
// forms; a peer of an older build ignores Framed and sends JSON. Such a
// head also reads consecutive markers sent as one message (SearchMarkers):
// a search over 50 buckets that match nothing sent 50 stream messages.
const searchFrame = 0x01

// maxSearchHeader bounds a framed message's header (a marker or batch
// lists buckets; a message of a whole stream is far smaller).
const maxSearchHeader = 16 << 20

// EncodeSearchMsg writes m as JSON, or framed (above) when framed.
func EncodeSearchMsg(m SearchMsg, framed bool) ([]byte, error) {
	if !framed {
		return json.Marshal(m)
	}
	partial := m.Partial
	m.Partial = nil
	h, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(h)+len(partial))
	b = append(b, searchFrame)
	b = binary.AppendUvarint(b, uint64(len(h)))
	b = append(b, h...)
	return append(b, partial...), nil
}

// DecodeSearchMsg reads a message in either form; a framed message's
// Partial aliases b. A malformed frame is an error, never a guess.
func DecodeSearchMsg(b []byte) (SearchMsg, error) {
	var m SearchMsg
	if len(b) == 0 || b[0] != searchFrame {
		if err := json.Unmarshal(b, &m); err != nil {
			return m, err
		}
		return m, checkMarkers(m)
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > maxSearchHeader || n > uint64(len(b)-1-k) {
		return m, errors.New("search message: malformed frame header")
	}
	h, rest := b[1+k:1+k+int(n)], b[1+k+int(n):]
	if err := json.Unmarshal(h, &m); err != nil {
		return m, fmt.Errorf("search message: frame header: %w", err)
	}
	if m.Partial != nil {
		return m, errors.New("search message: a partial both in the header and framed")
	}
	if len(rest) > 0 {
		m.Partial = rest
	}
	return m, checkMarkers(m)
}

// checkMarkers: a marker list holds only markers, and only a markers
// message holds one.
func checkMarkers(m SearchMsg) error {
	for _, x := range m.Markers {
		if m.Kind != SearchMarkers || x.Kind != SearchMarker || x.Partial != nil || x.Markers != nil {
			return errors.New("search message: a marker list holds only markers, and only in a markers message")
		}
	}
	return nil
}
