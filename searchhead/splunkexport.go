package searchhead

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/quarry-dev/quarry/query"
)

// serveExport is GET|POST /services/search/jobs/export: the search runs
// at once through Head.Search (429 when the head is busy, as
// POST /v1/search) and its rows stream as they are released — an event
// search bucket by bucket, anything else once merged — with no job kept.
// output_mode json writes one {"preview":false,"offset":N,"result":{…}}
// a line (the last with "lastrow":true) and, when the search has
// messages (partial, truncated), a last {"preview":false,"messages":[…]}
// line; xml writes <results> with the messages at the end; csv and raw
// write rows only and say whether the search was partial in the HTTP
// trailer X-Quarry-Partial (an error in X-Quarry-Error).
func (s *splunkAPI) serveExport(w http.ResponseWriter, r *http.Request) {
	mode, ok := s.request(w, r, "xml", "json", "csv", "raw")
	if !ok {
		return
	}
	c, ok := s.auth(w, r, mode)
	if !ok {
		return
	}
	req, events, err := s.searchRequest(r)
	if err != nil {
		s.fail(w, mode, err)
		return
	}
	ew := &exportWriter{w: w, mode: mode, events: events, bw: bufio.NewWriterSize(w, 64<<10)}
	ew.fl, _ = w.(http.Flusher)
	resp, err := s.searchNow(withCaller(r.Context(), r), req, c.indexes, ew.emit)
	if err != nil && !ew.started {
		s.fail(w, mode, err)
		return
	}
	ew.end(resp, err)
}

// exportWriter streams an export's rows in one output mode.
type exportWriter struct {
	w       http.ResponseWriter
	fl      http.Flusher
	bw      *bufio.Writer
	cw      *csv.Writer
	mode    string
	events  bool // event rows: the columns are the first batch's fields
	started bool
	fields  []string       // csv, xml and raw columns: the first batch's
	offset  int            // the next row's offset
	held    map[string]any // json: the last row, written once the next arrives (lastrow)
	line    bytes.Buffer
}

// start writes the headers and what precedes the rows. A streamed
// event search's columns are those of its first batch.
func (e *exportWriter) start(fields []string, rows []map[string]any) {
	e.started = true
	e.fields = fields
	if e.events || len(fields) == 0 {
		e.fields = rowFields(rows)
	}
	h := e.w.Header()
	switch e.mode {
	case "json":
		h.Set("Content-Type", "application/json")
	case "csv", "raw":
		h.Set("Content-Type", "text/csv; charset=UTF-8")
		if e.mode == "raw" {
			h.Set("Content-Type", "text/plain; charset=UTF-8")
		}
		h.Set("Trailer", "X-Quarry-Partial, X-Quarry-Error")
	default:
		h.Set("Content-Type", "text/xml; charset=UTF-8")
	}
	e.w.WriteHeader(200)
	switch e.mode {
	case "csv":
		e.cw = csv.NewWriter(e.bw)
		writeCSVRows(e.cw, e.fields, nil, true)
	case "xml":
		e.bw.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results preview='0'>\n")
		var b bytes.Buffer
		writeXMLMeta(&b, e.fields)
		e.bw.Write(b.Bytes())
	}
}

// emit writes a batch of rows and flushes them to the client.
func (e *exportWriter) emit(rows []map[string]any, fields []string) error {
	if !e.started {
		e.start(fields, rows)
	}
	for _, r := range rows {
		e.row(r)
	}
	if e.cw != nil {
		e.cw.Flush()
	}
	if err := e.bw.Flush(); err != nil {
		return err
	}
	if e.fl != nil {
		e.fl.Flush()
	}
	return nil
}

func (e *exportWriter) row(r map[string]any) {
	switch e.mode {
	case "json":
		if e.held != nil {
			e.jsonLine(e.held, false)
		}
		e.held = r
		return
	case "csv":
		writeCSVRows(e.cw, e.fields, []map[string]any{r}, false)
	case "raw":
		e.bw.WriteString(rawLine(r, e.fields) + "\n")
	default:
		var b bytes.Buffer
		writeXMLResult(&b, e.offset, e.fields, r)
		e.bw.Write(b.Bytes())
	}
	e.offset++
}

// jsonLine writes {"preview":false,"offset":N[,"lastrow":true],"result":{…}}.
func (e *exportWriter) jsonLine(r map[string]any, last bool) {
	e.line.Reset()
	e.line.WriteString(`{"preview":false,"offset":` + strconv.Itoa(e.offset))
	if last {
		e.line.WriteString(`,"lastrow":true`)
	}
	b, _ := json.Marshal(splunkRow(r))
	e.line.WriteString(`,"result":`)
	e.line.Write(b)
	e.line.WriteString("}\n")
	e.bw.Write(e.line.Bytes())
	e.offset++
}

// rawLine is a row's _raw, or for a row without one (stats, table) its
// fields as key=value pairs.
func rawLine(r map[string]any, fields []string) string {
	if raw, ok := r["_raw"].(string); ok {
		return raw
	}
	var parts []string
	for _, f := range fields {
		if v, ok := splunkValue(r[f]); ok {
			if s, isStr := v.(string); isStr {
				parts = append(parts, f+"="+strconv.Quote(s))
			} else {
				parts = append(parts, f+"="+strconv.Quote(strings.Join(v.([]string), "\n")))
			}
		}
	}
	return strings.Join(parts, " ")
}

// end writes what follows the rows: the last JSON row, the messages of
// the search (or its error), the trailers.
func (e *exportWriter) end(resp *query.Response, err error) {
	var msgs []splunkMsg
	partial := false
	if err != nil {
		msgs = []splunkMsg{{"ERROR", err.Error()}}
	} else {
		msgs = summaryMessages(resp.Summary)
		partial = resp.Summary.Partial
		if !e.started {
			e.start(resp.Fields, nil)
		}
	}
	switch e.mode {
	case "json":
		if e.held != nil {
			e.jsonLine(e.held, true)
		}
		if len(msgs) > 0 {
			b, _ := json.Marshal(map[string]any{"preview": false, "messages": msgs})
			e.bw.Write(append(b, '\n'))
		}
	case "xml":
		var b bytes.Buffer
		writeXMLMessages(&b, msgs)
		b.WriteString("</results>\n")
		e.bw.Write(b.Bytes())
	default:
		if e.cw != nil {
			e.cw.Flush()
		}
		e.w.Header().Set("X-Quarry-Partial", strconv.FormatBool(partial))
		if err != nil {
			e.w.Header().Set("X-Quarry-Error", err.Error())
		}
	}
	_ = e.bw.Flush()
}
