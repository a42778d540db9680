package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ParseHECToken parses `--hec-token T[=index,…][:option=value…]`: the
// token, the indexes it may write (none listed: any index) with the first as
// its default, and Splunk's per-token switches after colons:
// `useack=true|false` (default true: requests get ack ids on a channel;
// false: no channel, the 200 itself is the acknowledgement, SPEC §4) and
// `allowquerystringauth=true|false` (default false: whether `?token=` is
// accepted, as Splunk's allowQueryStringAuth). Option names are
// case-insensitive; an unknown or repeated option is refused.
func ParseHECToken(s string) (HECToken, error) {
	head, opts, hasOpts := strings.Cut(strings.TrimSpace(s), ":")
	tok, list, hasList := strings.Cut(head, "=")
	if tok == "" || strings.ContainsAny(tok, " \t,;") {
		return HECToken{}, fmt.Errorf("parse --hec-token %q: want T[=index,…][:useack=false] with a non-empty token", s)
	}
	t := HECToken{Token: tok, Ack: true}
	if hasList {
		for _, ix := range strings.Split(list, ",") {
			ix = strings.TrimSpace(ix)
			if ix == "" {
				return HECToken{}, fmt.Errorf("parse --hec-token %q: empty index name in %q", s, list)
			}
			t.Indexes = append(t.Indexes, ix)
		}
		t.DefaultIndex = t.Indexes[0]
	}
	if !hasOpts {
		return t, nil
	}
	seen := map[string]bool{}
	for _, o := range strings.Split(opts, ":") {
		k, v, ok := strings.Cut(o, "=")
		k = strings.ToLower(k)
		if !ok || seen[k] {
			return HECToken{}, fmt.Errorf("parse --hec-token %q: option %q: want useack=true|false, allowquerystringauth=true|false, host=H, source=S or sourcetype=T, each once", s, o)
		}
		seen[k] = true
		switch k {
		case "host", "source", "sourcetype":
			if v == "" || len(v) > 1024 || strings.ContainsAny(v, "\n\r") {
				return HECToken{}, fmt.Errorf("parse --hec-token %q: option %q: a default %s of 1 to 1024 bytes on one line", s, o, k)
			}
			switch k {
			case "host":
				t.Host = v
			case "source":
				t.Source = v
			default:
				t.Sourcetype = v
			}
			continue
		}
		var b bool
		switch v {
		case "true":
			b = true
		case "false":
		default:
			return HECToken{}, fmt.Errorf("parse --hec-token %q: option %q: value must be true or false", s, o)
		}
		switch k {
		case "useack":
			t.Ack = b
		case "allowquerystringauth":
			t.AllowQueryStringAuth = b
		default:
			return HECToken{}, fmt.Errorf("parse --hec-token %q: unknown option %q (known: useack, allowquerystringauth, host, source, sourcetype)", s, k)
		}
	}
	return t, nil
}

// UnmarshalJSON reads a token of the cluster config: {"token", "indexes",
// "default_index", "use_ack", "allow_query_string_auth", "disabled",
// "host", "source", "sourcetype"}.
// use_ack defaults to true when absent (Splunk's useACK as quarry ships
// it); "ack", the name before use_ack, is still read so config committed by
// an older manager keeps its meaning. An unknown field is refused (a typo
// such as "useack" must not silently leave acks on), as the config API
// refuses unknown fields everywhere else.
func (t *HECToken) UnmarshalJSON(b []byte) error {
	type plain HECToken
	var v struct {
		plain
		UseAck    *bool `json:"use_ack"`
		LegacyAck *bool `json:"ack"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("hec token: %w", err)
	}
	*t = HECToken(v.plain)
	if len(t.Indexes) == 0 {
		t.Indexes = nil // [] and absent both mean any index
	}
	switch {
	case v.UseAck != nil:
		t.Ack = *v.UseAck
	case v.LegacyAck != nil:
		t.Ack = *v.LegacyAck
	default:
		t.Ack = true
	}
	return nil
}

// MarshalJSON writes the token with use_ack and, for managers and peers of
// an older version that only know that name, the same value as "ack": an
// older peer must not read a missing "ack" as false and stop waiting for
// durability during a rolling upgrade.
func (t HECToken) MarshalJSON() ([]byte, error) {
	type plain HECToken
	return json.Marshal(struct {
		plain
		LegacyAck bool `json:"ack"`
	}{plain(t), t.Ack})
}
