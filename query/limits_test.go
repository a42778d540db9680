package query

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// reviewN4 is the review's N4 query: a replace that multiplies _raw by 10,
// then `more` replaces of x by 10 each, then its length.
func reviewN4(more int) string {
	rep := `"` + strings.Repeat("$1", 10) + `"`
	q := `index=main | eval x=replace(_raw,"(.+)",` + rep + `)`
	for i := 0; i < more; i++ {
		q += ` | eval x=replace(x,"(.+)",` + rep + `)`
	}
	return q + " | eval n=len(x) | fields n"
}

func n4Segment() []Segment {
	return []Segment{NewMemSegment(uniq("main~0~p"), "main", []Event{
		{Time: fixedNow.UnixNano(), Raw: strings.Repeat("a", 100), Index: "main"},
	})}
}

// TestValueCapReviewN4: the review's 390-byte query grew one 100-byte
// event to 1 GB. Up to 1,000,000 bytes it runs; the replace that would
// make 10,000,000 bytes fails the search with ErrLimit naming the limit,
// on the peer half (eval before any split) and on the head half (eval
// after a split command), without building the value.
func TestValueCapReviewN4(t *testing.T) {
	segs := n4Segment()
	resp, err := Search(context.Background(), Request{Query: reviewN4(3), Now: fixedNow}, segs)
	if err != nil || len(resp.Results) != 1 || resp.Results[0]["n"] != "1000000" && resp.Results[0]["n"] != float64(1000000) {
		t.Fatalf("four replaces (1,000,000 bytes): %v %+v", err, resp)
	}
	for _, q := range []string{
		reviewN4(5),
		strings.Replace(reviewN4(5), "index=main |", "index=main | head 1 |", 1),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Search(context.Background(), Request{Query: q, Now: fixedNow}, segs)
		runtime.ReadMemStats(&after)
		// Before the cap the sixth replace built 100 MB and a seventh 1 GB;
		// now the search allocates what four replaces make (~1.1 MB, and
		// the fifth's bound pass) and stops.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
			t.Fatalf("%q allocated %d bytes, want under 32 MiB", q, alloc)
		} else {
			t.Logf("refused after allocating %.1f MB", float64(alloc)/1e6)
		}
		if !IsLimitError(err) || !strings.Contains(err.Error(), "replace would make a value of up to 10000020 bytes") || !strings.Contains(err.Error(), "1048576-byte limit") {
			t.Fatalf("%q: err %v, want the 1 MiB value limit", q, err)
		}
	}
}

// Concatenation doubles a value per eval; upper/lower keep the cap too.
func TestValueCapConcat(t *testing.T) {
	q := "index=main | eval x=_raw" + strings.Repeat(" | eval x=x . x", 13) + " | eval n=len(x) | fields n"
	resp, err := Search(context.Background(), Request{Query: q, Now: fixedNow}, n4Segment())
	if err != nil || len(resp.Results) != 1 || resp.Results[0]["n"] != float64(100<<13) {
		t.Fatalf("100 × 2^13 bytes: %v %+v", err, resp)
	}
	for _, q := range []string{
		"index=main | eval x=_raw" + strings.Repeat(" | eval x=x . x", 14),
		"index=main | eval x=_raw" + strings.Repeat(" | eval x=x+x", 14),
		"index=main | eval x=_raw" + strings.Repeat(" | eval x=x . x", 13) + ` | where len(x . x)>0`,
		"index=main | eval x=_raw" + strings.Repeat(" | eval x=x . x", 13) + ` | stats count by x | eval y=upper(x . x)`,
	} {
		_, err := Search(context.Background(), Request{Query: q, Now: fixedNow}, n4Segment())
		if !IsLimitError(err) {
			t.Fatalf("%q: err %v, want the value limit", q, err)
		}
	}
}

// replaceBounded refuses exactly when its bound passes the limit, and
// otherwise equals ReplaceAllString.
func TestReplaceBounded(t *testing.T) {
	re, _ := compileRegex(`(\d+)-(\w+)`)
	s := strings.Repeat("12-ab ", 1000)
	out, _, ok := replaceBounded(re, s, "$2:$1")
	if !ok || out != re.ReplaceAllString(s, "$2:$1") {
		t.Fatalf("small replace refused or wrong")
	}
	big := strings.Repeat("x", MaxValueBytes/2+1)
	if _, _, ok := replaceBounded(re, big, "$1$1$1"); !ok {
		t.Fatal("a value with no match refused") // the one-pass bound sees no match
	}
	all, _ := compileRegex(`(.+)`)
	if _, bound, ok := replaceBounded(all, big, "$1$1"); ok || bound != 2*len(big)+4 {
		t.Fatalf("doubling %d bytes: ok %v bound %d", len(big), ok, bound)
	}
}

// Regex source and program caps are syntax errors at the regex, in rex,
// match and replace.
func TestRegexLimits(t *testing.T) {
	long := strings.Repeat("a", MaxRegexBytes+1)
	prog := strings.Repeat(".{0,20}NNNzz|", 60) + "x" // small source, big program
	for _, q := range []string{
		`* | rex "(?<x>` + long + `)"`,
		`* | where match(_raw, "` + long + `")`,
		`* | eval y=replace(_raw, "` + prog + `", "")`,
	} {
		_, err := Parse(q)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Error(), "regular expression of at most") {
			t.Fatalf("%.60q…: err %v, want a regex limit syntax error", q, err)
		}
	}
	if _, err := Parse(`* | rex "(?<x>` + strings.Repeat("a", 2000) + `)"`); err != nil {
		t.Fatalf("a 2,000-byte regex: %v", err)
	}
	// A pattern from a field is compiled per row under the same caps:
	// past them it matches nothing.
	segs := []Segment{NewMemSegment(uniq("main~0~p"), "main", []Event{
		{Time: fixedNow.UnixNano(), Raw: "p=" + long, Index: "main"},
	})}
	resp, err := Search(context.Background(), Request{Query: `* | where match(_raw, p)`, Now: fixedNow}, segs)
	if err != nil || len(resp.Results) != 0 {
		t.Fatalf("field pattern past the cap: %v %+v", err, resp)
	}
}

// values() shows at most MaxValues distinct values per group; a longer
// list is cut to its first MaxValues in sort order, and the summary says
// so — on the merge of peer partials and in the head's commands.
func TestValuesCapWarns(t *testing.T) {
	evs := make([]Event, MaxValues+1)
	for i := range evs {
		evs[i] = Event{Time: fixedNow.UnixNano() + int64(i), Raw: fmt.Sprintf("v=%06d", i), Index: "main"}
	}
	segs := []Segment{
		NewMemSegment(uniq("main~0~p"), "main", evs[:MaxValues/2]),
		NewMemSegment(uniq("main~1~p"), "main", evs[MaxValues/2:]),
	}
	for _, q := range []string{
		"index=main | stats values(v) as vs dc(v) as n",
		"index=main | head 20000 | stats values(v) as vs dc(v) as n",
	} {
		resp, err := Search(context.Background(), Request{Query: q, Now: fixedNow}, segs)
		if err != nil || len(resp.Results) != 1 {
			t.Fatalf("%q: %v %+v", q, err, resp)
		}
		vs, _ := resp.Results[0]["vs"].([]string)
		if len(vs) != MaxValues || vs[0] != "000000" || resp.Results[0]["n"] != int64(MaxValues+1) {
			t.Fatalf("%q: %d values (first %q), dc %v", q, len(vs), vs[0], resp.Results[0]["n"])
		}
		if len(resp.Summary.Warnings) != 1 || resp.Summary.Warnings[0] != valuesWarning {
			t.Fatalf("%q: warnings %q", q, resp.Summary.Warnings)
		}
	}
	resp, err := Search(context.Background(), Request{Query: "index=main | head 10 | stats values(v)", Now: fixedNow}, segs)
	if err != nil || len(resp.Summary.Warnings) != 0 {
		t.Fatalf("a short list: %v %q", err, resp.Summary.Warnings)
	}
}
