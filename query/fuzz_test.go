package query

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParse: any input either parses or fails with a *SyntaxError whose
// position lies inside the query; a query that parses also compiles and
// runs over a small segment without panicking.
// CI: go test -run='^$' -fuzz=FuzzParse -fuzztime=20s ./query/
func FuzzParse(f *testing.F) {
	for _, s := range append(append([]string{}, genTerms...), genFieldTerms...) {
		f.Add(s)
	}
	for _, s := range genCommands {
		f.Add("error " + s)
	}
	for _, s := range splitQueries {
		f.Add(s)
	}
	for _, s := range []string{"", "|", "||", `"`, `a="`, "(((", ")", "NOT", "a OR", "earliest=-1h@h latest=now",
		"| eval x=((1)", "| where", `| rex "(?<a>"`, "| stats count by", "| sort - - x", "| head -1", "\x00|\xff"} {
		f.Add(s)
	}
	// Review N1: function calls skipped the nesting cap; half a million
	// ln( levels (2 MB) overflowed the stack. Also the same shape under
	// MaxQueryBytes, and if( and case( chains.
	f.Add("* | eval x=" + strings.Repeat("ln(", 500000) + "1" + strings.Repeat(")", 500000))
	f.Add("* | eval x=" + strings.Repeat("ln(", 60000) + "1" + strings.Repeat(")", 60000))
	f.Add("* | where " + strings.Repeat("if(true,", 200) + "1" + strings.Repeat(",2)", 200) + "=1")
	f.Add("* | eval x=" + strings.Repeat("case(x=1,", 200) + "1" + strings.Repeat(")", 200))
	f.Add("* | eval x=1" + strings.Repeat("+1", 20000))
	segs := []Segment{NewMemSegment(uniq("main~0~p"), "main", []Event{
		{Time: fixedNow.UnixNano(), Raw: `a=1 error GET /api/v1/cart status=500 {"x":1}`, Host: "h", Source: "s", Sourcetype: "st", Index: "main", Fields: []Field{{"path", "/api/v1/cart"}}},
		{Time: fixedNow.UnixNano() + 1, Raw: `{"user":"bob","n":[1,2]}`, Host: "h2", Index: "main"},
	})}
	f.Fuzz(func(t *testing.T, q string) {
		_, err := Parse(q)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) error %v is not a SyntaxError", q, err)
			}
			if se.Pos < 0 || se.Pos > len(q) {
				t.Fatalf("Parse(%q) position %d outside the query", q, se.Pos)
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = Search(ctx, Request{Query: q, Now: fixedNow}, segs)
	})
}
