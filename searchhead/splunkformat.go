package searchhead

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The answers of Splunk's REST API as Splunk documents them: results in
// JSON ({"preview", "init_offset", "messages", "fields", "results"}), CSV
// and XML (<results><meta><fieldOrder>…<result offset=…><field k=…>), job
// entries in JSON ({"entry": [{"name", "id", "content": {…}}]}) and Atom
// XML (<entry>…<content><s:dict><s:key name=…>), messages. Values are
// written as Splunk writes them: every value a string, a multivalue field
// a list of strings, a null field left out.

// resultsPage is one page of results with the messages that go with it.
type resultsPage struct {
	rows     []map[string]any
	fields   []string
	messages []splunkMsg
	offset   int
}

// page cuts rows to [off, off+count) (count 0: to the end) and names its
// fields: the answer's columns, or for events the event fields first, then
// every other field of the page, sorted.
func page(rows []map[string]any, columns []string, msgs []splunkMsg, off, count int) resultsPage {
	if off > len(rows) {
		off = len(rows)
	}
	end := len(rows)
	if count > 0 && off+count < end {
		end = off + count
	}
	p := resultsPage{rows: rows[off:end], messages: msgs, offset: off}
	p.fields = columns
	if len(columns) == 0 {
		p.fields = rowFields(p.rows)
	}
	return p
}

// rowFields names the fields of event rows: eventFields in their order,
// then the others sorted.
func rowFields(rows []map[string]any) []string {
	seen := map[string]bool{}
	for _, r := range rows {
		for k := range r {
			seen[k] = true
		}
	}
	var out []string
	for _, f := range eventFields {
		if seen[f] {
			out = append(out, f)
			delete(seen, f)
		}
	}
	rest := make([]string, 0, len(seen))
	for k := range seen {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// splunkValue is a value as Splunk writes it: a string, or a list of
// strings for a multivalue field; ok false for a null.
func splunkValue(v any) (any, bool) {
	switch x := v.(type) {
	case nil:
		return nil, false
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, _ := splunkValue(e)
			str, _ := s.(string)
			out = append(out, str)
		}
		return out, true
	case []string:
		return x, true
	default:
		return valueString(v), true
	}
}

// valueString renders a scalar as text (numbers without exponent in the
// usual range).
func valueString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		if a := math.Abs(x); a != 0 && (a >= 1e21 || a < 1e-6) || math.IsNaN(x) || math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	default:
		return fmt.Sprint(v)
	}
}

// splunkRow is a result row with Splunk's values.
func splunkRow(row map[string]any) map[string]any {
	out := make(map[string]any, len(row))
	for k, v := range row {
		if sv, ok := splunkValue(v); ok {
			out[k] = sv
		}
	}
	return out
}

type fieldName struct {
	Name string `json:"name"`
}

// writeResults answers a results page as JSON, CSV or XML.
func writeResults(w http.ResponseWriter, mode string, p resultsPage) {
	switch mode {
	case "json":
		rows := make([]map[string]any, len(p.rows))
		for i, r := range p.rows {
			rows[i] = splunkRow(r)
		}
		fields := make([]fieldName, len(p.fields))
		for i, f := range p.fields {
			fields[i] = fieldName{f}
		}
		msgs := p.messages
		if msgs == nil {
			msgs = []splunkMsg{}
		}
		writeJSON(w, 200, map[string]any{"preview": false, "init_offset": p.offset, "messages": msgs, "fields": fields, "results": rows})
	case "csv":
		w.Header().Set("Content-Type", "text/csv; charset=UTF-8")
		w.WriteHeader(200)
		cw := csv.NewWriter(w)
		writeCSVRows(cw, p.fields, p.rows, true)
		cw.Flush()
	default:
		var b bytes.Buffer
		b.WriteString("<results preview='0'>\n")
		writeXMLMeta(&b, p.fields)
		writeXMLMessages(&b, p.messages)
		for i, r := range p.rows {
			writeXMLResult(&b, p.offset+i, p.fields, r)
		}
		b.WriteString("</results>\n")
		writeXML(w, 200, b.String())
	}
}

// writeCSVRows writes rows in the fields' order (a multivalue field's
// values on separate lines of one cell, as Splunk writes them), after the
// header when header is set.
func writeCSVRows(cw *csv.Writer, fields []string, rows []map[string]any, header bool) {
	if header && len(fields) > 0 {
		_ = cw.Write(fields)
	}
	rec := make([]string, len(fields))
	for _, r := range rows {
		for i, f := range fields {
			rec[i] = ""
			switch v, _ := splunkValue(r[f]); x := v.(type) {
			case string:
				rec[i] = x
			case []string:
				rec[i] = strings.Join(x, "\n")
			}
		}
		_ = cw.Write(rec)
	}
}

func writeXMLMeta(b *bytes.Buffer, fields []string) {
	b.WriteString("<meta>\n<fieldOrder>\n")
	for _, f := range fields {
		b.WriteString("<field>" + xmlText(f) + "</field>\n")
	}
	b.WriteString("</fieldOrder>\n</meta>\n")
}

func writeXMLMessages(b *bytes.Buffer, msgs []splunkMsg) {
	if len(msgs) == 0 {
		return
	}
	b.WriteString("<messages>\n")
	for _, m := range msgs {
		b.WriteString("<msg type=\"" + xmlText(m.Type) + "\">" + xmlText(m.Text) + "</msg>\n")
	}
	b.WriteString("</messages>\n")
}

// writeXMLResult writes one <result>: its fields in order, then any other
// field of the row sorted; _raw as <v xml:space='preserve'>.
func writeXMLResult(b *bytes.Buffer, offset int, fields []string, row map[string]any) {
	fmt.Fprintf(b, "<result offset='%d'>\n", offset)
	keys := slices.Clone(fields)
	var rest []string
	for k := range row {
		if !slices.Contains(fields, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range append(keys, rest...) {
		v, ok := splunkValue(row[k])
		if !ok {
			continue
		}
		b.WriteString("<field k='" + xmlText(k) + "'>")
		switch x := v.(type) {
		case string:
			if k == "_raw" {
				b.WriteString("<v xml:space='preserve' trunc='0'>" + xmlText(x) + "</v>")
			} else {
				b.WriteString("<value><text>" + xmlText(x) + "</text></value>")
			}
		case []string:
			for _, e := range x {
				b.WriteString("<value><text>" + xmlText(e) + "</text></value>")
			}
		}
		b.WriteString("</field>\n")
	}
	b.WriteString("</result>\n")
}

// writeMessages answers messages alone (a DELETE, a cancel).
func writeMessages(w http.ResponseWriter, mode string, status int, msgs ...splunkMsg) {
	if mode == "json" {
		writeJSON(w, status, map[string]any{"messages": msgs})
		return
	}
	var b bytes.Buffer
	b.WriteString("<response>\n")
	writeXMLMessages(&b, msgs)
	b.WriteString("</response>\n")
	writeXML(w, status, b.String())
}

func writeXML(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/xml; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + body))
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// kv is one key of a job's content, in the order it is written.
type kv struct {
	k string
	v any
}

const splunkTime = "2006-01-02T15:04:05.000-07:00"

// jobContent is a job's content: Splunk's keys for what quarry knows, and
// quarry_summary (the search summary of SPEC §7: buckets, partial,
// warnings) once it is done.
func jobContent(v jobView) []kv {
	done := v.state == stateDone || v.state == stateFailed
	progress, events := 0.0, 0
	if done {
		progress = 1
	}
	if v.events() {
		events = len(v.rows)
	}
	run := 0.0
	if !v.started.IsZero() {
		end := v.finished
		if end.IsZero() {
			end = time.Now()
		}
		run = end.Sub(v.started).Seconds()
	}
	msgs := []any{}
	for _, m := range v.messages {
		msgs = append(msgs, map[string]any{"type": m.Type, "text": m.Text})
	}
	c := []kv{{"sid", v.sid}, {"search", v.search}, {"dispatchState", v.state}, {"isDone", done},
		{"isFailed", v.state == stateFailed}, {"isFinalized", false}, {"isPaused", false}, {"isZombie", false},
		{"doneProgress", progress}, {"resultCount", len(v.rows)}, {"eventCount", events},
		{"runDuration", run}, {"ttl", int(v.ttlLeft.Seconds())},
		{"request", map[string]any{"search": v.search, "earliest_time": v.req.Earliest, "latest_time": v.req.Latest}},
		{"messages", msgs}}
	if v.summary != nil {
		var sum any
		b, _ := json.Marshal(v.summary)
		_ = json.Unmarshal(b, &sum)
		c = append(c, kv{"quarry_summary", sum})
	}
	return c
}

// writeEntries answers jobs as Splunk's entries: one job (single) as a
// bare <entry> in XML (as Splunk answers GET search/jobs/{sid}) or a list
// of entries in a <feed>; in JSON always {"entry": […], "paging", …}.
func writeEntries(w http.ResponseWriter, mode, base string, views []jobView, single bool) {
	now := time.Now().Format(splunkTime)
	if mode == "json" {
		var b bytes.Buffer
		b.WriteString(`{"links":{},"origin":` + jsonString(base+"/services/search/jobs") + `,"updated":` + jsonString(now) + `,"entry":[`)
		for i, v := range views {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONEntry(&b, base, v)
		}
		fmt.Fprintf(&b, `],"paging":{"total":%d,"perPage":%d,"offset":0},"messages":[]}`+"\n", len(views), len(views))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		_, _ = w.Write(b.Bytes())
		return
	}
	var b bytes.Buffer
	const ns = `xmlns="http://www.w3.org/2005/Atom" xmlns:s="http://dev.splunk.com/ns/rest" xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/"`
	if single && len(views) == 1 {
		writeXMLEntry(&b, ns, base, views[0])
		writeXML(w, 200, b.String())
		return
	}
	b.WriteString("<feed " + ns + ">\n<title>jobs</title>\n<id>" + xmlText(base+"/services/search/jobs") + "</id>\n<updated>" + now + "</updated>\n")
	fmt.Fprintf(&b, "<author><name>quarry</name></author>\n<opensearch:totalResults>%d</opensearch:totalResults>\n<opensearch:itemsPerPage>%d</opensearch:itemsPerPage>\n<opensearch:startIndex>0</opensearch:startIndex>\n", len(views), len(views))
	for _, v := range views {
		writeXMLEntry(&b, "", base, v)
	}
	b.WriteString("</feed>\n")
	writeXML(w, 200, b.String())
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func jobLinks(v jobView) []kv {
	p := "/services/search/jobs/" + v.sid
	return []kv{{"alternate", p}, {"events", p + "/events"}, {"results", p + "/results"}, {"control", p + "/control"}}
}

func writeJSONEntry(b *bytes.Buffer, base string, v jobView) {
	writeOrderedJSON(b, []kv{{"name", v.search}, {"id", base + "/services/search/jobs/" + v.sid}, {"updated", time.Now().Format(splunkTime)},
		{"links", jobLinks(v)}, {"published", v.created.Format(splunkTime)}, {"author", v.author},
		{"content", jobContent(v)}, {"acl", []kv{{"owner", v.author}, {"app", "search"}, {"sharing", "user"}}}})
}

// writeOrderedJSON writes kvs as a JSON object in their order; a value
// that is itself []kv nests.
func writeOrderedJSON(b *bytes.Buffer, kvs []kv) {
	b.WriteByte('{')
	for i, e := range kvs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(e.k) + ":")
		if sub, ok := e.v.([]kv); ok {
			writeOrderedJSON(b, sub)
			continue
		}
		vb, _ := json.Marshal(e.v)
		b.Write(vb)
	}
	b.WriteByte('}')
}

func writeXMLEntry(b *bytes.Buffer, ns, base string, v jobView) {
	if ns != "" {
		ns = " " + ns
	}
	b.WriteString("<entry" + ns + ">\n<title>" + xmlText(v.search) + "</title>\n<id>" + xmlText(base+"/services/search/jobs/"+v.sid) + "</id>\n")
	b.WriteString("<updated>" + time.Now().Format(splunkTime) + "</updated>\n")
	for _, l := range jobLinks(v) {
		b.WriteString("<link href=\"" + xmlText(l.v.(string)) + "\" rel=\"" + l.k + "\"/>\n")
	}
	b.WriteString("<published>" + v.created.Format(splunkTime) + "</published>\n<author><name>" + xmlText(v.author) + "</name></author>\n")
	b.WriteString("<content type=\"text/xml\">\n<s:dict>\n")
	for _, e := range jobContent(v) {
		b.WriteString("<s:key name=\"" + xmlText(e.k) + "\">")
		writeXMLValue(b, e.v)
		b.WriteString("</s:key>\n")
	}
	b.WriteString("</s:dict>\n</content>\n</entry>\n")
}

// writeXMLValue writes a value of a job's content as Splunk's Atom does:
// booleans 1/0, lists as <s:list>, objects as <s:dict> (keys sorted).
func writeXMLValue(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case nil:
	case bool:
		if x {
			b.WriteString("1")
		} else {
			b.WriteString("0")
		}
	case []any:
		b.WriteString("<s:list>")
		for _, e := range x {
			b.WriteString("<s:item>")
			writeXMLValue(b, e)
			b.WriteString("</s:item>")
		}
		b.WriteString("</s:list>")
	case map[string]any:
		b.WriteString("<s:dict>")
		for _, k := range slices.Sorted(maps.Keys(x)) {
			b.WriteString("<s:key name=\"" + xmlText(k) + "\">")
			writeXMLValue(b, x[k])
			b.WriteString("</s:key>")
		}
		b.WriteString("</s:dict>")
	default:
		b.WriteString(xmlText(valueString(v)))
	}
}
