package query

import (
	"slices"
	"strings"

	"github.com/valyala/fastjson"
)

// Search-time field extraction (SPEC §5).
//
// A JSON object event (_raw starting with '{') yields its fields, nested
// objects flattened with dots (a.b), arrays as multivalue fields, numbers
// and booleans as their JSON text. Any other event yields its key=value
// pairs: a key is [A-Za-z_][A-Za-z0-9_.]* not preceded by a key character,
// its value either a double-quoted string (up to the next quote, no escapes)
// or a run of characters up to whitespace, ',', ';' or '"'. A repeated key
// becomes a multivalue field. Fields already on the row (the default fields
// and indexed fields) are never overwritten: indexed values win.

func isKeyStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func isKeyChar(c byte) bool {
	return isKeyStart(c) || c >= '0' && c <= '9' || c == '.'
}

// extractKV calls fn for each key=value pair of raw.
func extractKV(raw string, fn func(k, v string)) {
	n := len(raw)
	for i := 0; i < n; i++ {
		if raw[i] != '=' || i == 0 {
			continue
		}
		// Walk back over the key.
		j := i
		for j > 0 && isKeyChar(raw[j-1]) {
			j--
		}
		for j < i && !isKeyStart(raw[j]) {
			j++
		}
		if j == i {
			continue
		}
		key := raw[j:i]
		var val string
		k := i + 1
		if k < n && raw[k] == '"' {
			e := strings.IndexByte(raw[k+1:], '"')
			if e < 0 {
				val = raw[k+1:]
				i = n
			} else {
				val = raw[k+1 : k+1+e]
				i = k + 1 + e
			}
		} else {
			e := k
			for e < n {
				c := raw[e]
				if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ';' || c == '"' {
					break
				}
				e++
			}
			val = raw[k:e]
			i = e - 1
		}
		fn(key, val)
	}
}

// extractFields adds the search-time fields of raw to f (never overwriting).
func extractFields(raw string, f map[string]any) { extractMode(raw, f, false, nil) }

// extractWanted is extractFields keeping only the fields named in want: a
// wanted field gets exactly the value extractFields would give it. A
// key=value pair's key ends right before its '=', so an event that is not
// a JSON object and holds none of the wanted names followed by '=' gives
// none of them: it is not scanned.
func extractWanted(raw string, f map[string]any, want []string) {
	if t := strings.TrimLeft(raw, " \t\r\n"); !strings.HasPrefix(t, "{") && !keyBeforeEq(raw, want) {
		return
	}
	extractMode(raw, f, false, want)
}

// keyBeforeEq reports whether one of names occurs in raw right before an
// '=' (looking from each '=', rarer in log lines than a name's first byte).
func keyBeforeEq(raw string, names []string) bool {
	for i := strings.IndexByte(raw, '='); i >= 0; {
		for _, n := range names {
			if i >= len(n) && raw[i-len(n):i] == n {
				return true
			}
		}
		k := strings.IndexByte(raw[i+1:], '=')
		if k < 0 {
			return false
		}
		i += 1 + k
	}
	return false
}

// extractJSON is extractFields for KV_MODE = json: a JSON object's fields
// only, no key=value pairs.
func extractJSON(raw string, f map[string]any) { extractMode(raw, f, true, nil) }

// extractMode adds the fields of raw (a JSON object's, or its key=value
// pairs unless jsonOnly) to f, only those named in want when want is not
// nil; a field's value never depends on which others are kept.
func extractMode(raw string, f map[string]any, jsonOnly bool, want []string) {
	var added map[string]bool
	add := func(k, v string) {
		if want != nil && !slices.Contains(want, k) {
			return
		}
		if old, ok := f[k]; ok {
			if !added[k] {
				return
			}
			switch x := old.(type) {
			case string:
				f[k] = []string{x, v}
			case []string:
				f[k] = append(x, v)
			}
			return
		}
		if added == nil {
			added = make(map[string]bool, 4)
		}
		added[k] = true
		f[k] = v
	}
	t := strings.TrimLeft(raw, " \t\r\n")
	if strings.HasPrefix(t, "{") {
		var p fastjson.Parser
		if v, err := p.Parse(t); err == nil && v.Type() == fastjson.TypeObject {
			flattenJSON("", v, add)
			return
		}
	}
	if !jsonOnly {
		extractKV(raw, add)
	}
}

func flattenJSON(prefix string, v *fastjson.Value, add func(k, v string)) {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		o.Visit(func(k []byte, c *fastjson.Value) {
			name := string(k)
			if prefix != "" {
				name = prefix + "." + name
			}
			flattenJSON(name, c, add)
		})
	case fastjson.TypeArray:
		a, _ := v.Array()
		for _, e := range a {
			flattenJSON(prefix, e, add)
		}
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		if prefix != "" {
			add(prefix, string(b))
		}
	case fastjson.TypeNull:
	case fastjson.TypeNumber:
		if prefix != "" {
			add(prefix, v.String()) // the number as written, so it is a term of _raw
		}
	default:
		if prefix != "" {
			add(prefix, v.String())
		}
	}
}

// EventRow is an event's row as searches see it: default fields, indexed
// fields, then search-time extractions.
func EventRow(ev *Event, bkt string, ord uint32, server string) Row {
	return eventRow(ev, bkt, ord, server)
}

// eventRow builds the row of an event: default fields, indexed fields,
// then search-time extractions.
func eventRow(ev *Event, bkt string, ord uint32, server string) Row {
	r := baseRow(ev, bkt, ord, server)
	extractFields(ev.Raw, r.F)
	return r
}

// baseRow is an event's row before search-time extraction: default fields
// and indexed fields.
func baseRow(ev *Event, bkt string, ord uint32, server string) Row {
	f := make(map[string]any, 16)
	f["_time"] = Time(ev.Time)
	f["_raw"] = ev.Raw
	f["host"] = ev.Host
	f["source"] = ev.Source
	f["sourcetype"] = ev.Sourcetype
	f["index"] = ev.Index
	f["splunk_server"] = server
	f["_bkt"] = bkt
	f["_cd"] = int64(ord)
	for _, fl := range ev.Fields {
		if old, ok := f[fl.Name]; ok {
			switch x := old.(type) {
			case string:
				if isDefaultField(fl.Name) {
					continue
				}
				f[fl.Name] = []string{x, fl.Value}
			case []string:
				f[fl.Name] = append(x, fl.Value)
			}
			continue
		}
		f[fl.Name] = fl.Value
	}
	return Row{T: ev.Time, B: bkt, C: ord, F: f}
}

// eventRow builds an event's row with the plan's knowledge bundle, when it
// has one that changes rows (knowledge.go), in place of the built-in
// extraction.
func (p *Plan) eventRow(ev *Event, bkt string, ord uint32) Row {
	if !p.know.rowRules() {
		return eventRow(ev, bkt, ord, p.server)
	}
	r := baseRow(ev, bkt, ord, p.server)
	p.know.apply(ev, &r, p.now)
	return r
}

func isDefaultField(name string) bool {
	switch name {
	case "_time", "_raw", "host", "source", "sourcetype", "index", "splunk_server", "_bkt", "_cd":
		return true
	}
	return false
}
