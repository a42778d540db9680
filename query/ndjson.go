package query

import (
	"bytes"
	"encoding/json"
	"sort"
)

// The NDJSON answer of a search (?stream=true): result lines, then one
// {"summary": …} line. Peers and search heads write result lines with this
// one function, so both answer the same shape.

// AppendRowJSON writes a result as one NDJSON line (SPEC §7 ?stream=true) whose keys come in the
// answer's fields order (a JSON object has no order, but a reader of the
// stream sees no "fields" list and shows columns as they come), then any
// other keys sorted.
func AppendRowJSON(b *bytes.Buffer, row map[string]any, fields []string) error {
	keys := make([]string, 0, len(row))
	seen := make(map[string]bool, len(row))
	for _, f := range fields {
		if _, ok := row[f]; ok && !seen[f] {
			keys = append(keys, f)
			seen[f] = true
		}
	}
	rest := make([]string, 0, len(row)-len(keys))
	for k := range row {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	b.WriteByte('{')
	for i, k := range append(keys, rest...) {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(row[k])
		if err != nil {
			return err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteString("}\n")
	return nil
}
