//go:build browser

package ui_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quarry-dev/quarry/internal/browsertest"
	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/searchhead/ui"
)

// open loads the search page with a query in its URL (the page runs it, as
// a bookmarked search does), over all time.
func open(t *testing.T, ctx context.Context, s *stack, q string) {
	t.Helper()
	u := s.URL + "/?range=all&q=" + url.QueryEscape(q)
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		t.Fatal(err)
	}
}

// waitDone waits until the page says how many results it got.
func waitDone(t *testing.T, ctx context.Context) string {
	t.Helper()
	var status string
	browsertest.Poll(t, 20*time.Second, func() error {
		if err := browsertest.Eval(ctx, `document.getElementById("status").textContent`, &status); err != nil {
			return err
		}
		if !strings.Contains(status, " results in ") {
			return fmt.Errorf("status %q", status)
		}
		return nil
	})
	return status
}

// A timechart draws one bar per span, each as high as its count: the bars'
// values equal the API's answer and an independent count of the test data,
// and their heights are count/ymax of the plot height.
func TestBrowserTimechartBars(t *testing.T) {
	s := startStack(t)
	ctx := browsertest.New(t, 60*time.Second)
	q := "index=main | timechart span=5m count"
	api, err := s.search(q)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{} // span start (unix s) → events, from the data itself
	for i := 0; i < s.N; i++ {
		want[fmt.Sprint(eventTime(i).Unix()/300*300)]++
	}
	open(t, ctx, s, q)
	type bar struct {
		Key    string
		Value  float64
		Height float64
	}
	var (
		bars         []bar
		ymax, plotH  float64
		firstPaintMS float64
	)
	browsertest.Poll(t, 20*time.Second, func() error {
		if err := browsertest.Eval(ctx, `Array.from(document.querySelectorAll("#chart-svg rect.bar")).map(r => ({key: r.dataset.key, value: +r.dataset.value, height: +r.getAttribute("height")}))`, &bars); err != nil {
			return err
		}
		if len(bars) != len(api.Results) {
			return fmt.Errorf("%d bars drawn, %d spans in the answer", len(bars), len(api.Results))
		}
		return nil
	})
	waitDone(t, ctx)
	browsertest.Eval(ctx, `+document.getElementById("chart-svg").dataset.ymax`, &ymax)
	browsertest.Eval(ctx, `+document.getElementById("chart-svg").dataset.plotHeight`, &plotH)
	browsertest.Eval(ctx, `(performance.getEntriesByName("first-contentful-paint")[0] || {startTime: -1}).startTime`, &firstPaintMS)
	total := 0
	for i, b := range bars {
		r := api.Results[i]
		if b.Key != fmt.Sprint(r["_time"]) {
			t.Fatalf("bar %d is for %s, the answer's span %d is %v", i, b.Key, i, r["_time"])
		}
		count := fmt.Sprint(r["count"])
		if fmt.Sprint(b.Value) != count {
			t.Fatalf("bar %d (%s) shows %v, the answer counts %s", i, b.Key, b.Value, count)
		}
		ts, _ := time.Parse(time.RFC3339Nano, b.Key)
		if w := want[fmt.Sprint(ts.Unix())]; float64(w) != b.Value {
			t.Fatalf("bar %d (%s) shows %v, the data has %d events in that span", i, b.Key, b.Value, w)
		}
		if h := b.Value / ymax * plotH; math.Abs(h-b.Height) > 0.01 {
			t.Fatalf("bar %d: height %v px, want %v (count %v of %v over %v px)", i, b.Height, h, b.Value, ymax, plotH)
		}
		total += int(b.Value)
	}
	if total != s.N {
		t.Fatalf("bars add up to %d events, want %d", total, s.N)
	}
	t.Logf("%d bars; first contentful paint %.0f ms after navigation", len(bars), firstPaintMS)
	browsertest.Screenshot(t, ctx, "search-timechart.png")
}

// An invalid query shows the parser's message and a caret under the column
// it names; the query box selects that character.
func TestBrowserSyntaxErrorColumn(t *testing.T) {
	s := startStack(t)
	ctx := browsertest.New(t, 60*time.Second)
	q := "index=main | stats cuont by status"
	_, perr := query.Parse(q)
	var se *query.SyntaxError
	if !errors.As(perr, &se) {
		t.Fatalf("%q parses: %v", q, perr)
	}
	open(t, ctx, s, q)
	var got struct {
		Visible bool
		Msg     string
		Column  string
		Caret   string
		Query   string
		Sel     int
	}
	browsertest.Poll(t, 20*time.Second, func() error {
		if err := browsertest.Eval(ctx, `(() => { const c = document.getElementById("error-caret"); return {
			visible: !document.getElementById("error").hidden, msg: document.getElementById("error-msg").textContent,
			column: c ? c.dataset.column : "", caret: c ? c.textContent : "",
			query: (document.getElementById("error-query-text") || {}).textContent || "",
			sel: document.getElementById("q").selectionStart } })()`, &got); err != nil {
			return err
		}
		if !got.Visible || got.Column == "" {
			return fmt.Errorf("no error shown yet: %+v", got)
		}
		return nil
	})
	col := se.Pos + 1
	if got.Column != fmt.Sprint(col) || got.Caret != strings.Repeat(" ", se.Pos)+"^" || got.Query != q {
		t.Fatalf("caret %q at column %s under %q; want column %d", got.Caret, got.Column, got.Query, col)
	}
	if !strings.Contains(got.Msg, fmt.Sprintf("column %d", col)) || !strings.Contains(got.Msg, "cuont") {
		t.Fatalf("message %q does not name column %d and what was found", got.Msg, col)
	}
	if got.Sel != se.Pos {
		t.Fatalf("query box selection at %d, want %d", got.Sel, se.Pos)
	}
	browsertest.Screenshot(t, ctx, "search-syntax-error.png")
}

// The field sidebar's top values of a field are a `top` search's, in its
// order and with its counts; clicking one narrows the search to it.
func TestBrowserFieldSidebarMatchesTop(t *testing.T) {
	s := startStack(t)
	ctx := browsertest.New(t, 60*time.Second)
	top, err := s.search("index=main | top status")
	if err != nil {
		t.Fatal(err)
	}
	open(t, ctx, s, "index=main")
	status := waitDone(t, ctx)
	if !strings.HasPrefix(status, fmt.Sprintf("%d results", s.N)) {
		t.Fatalf("status %q, want %d results", status, s.N)
	}
	type fv struct {
		Value string
		Count string
	}
	var side []fv
	if err := browsertest.Eval(ctx, `Array.from(document.querySelectorAll('#fields section[data-field="status"] a.fv')).map(a => ({value: a.dataset.value, count: a.dataset.count}))`, &side); err != nil {
		t.Fatal(err)
	}
	if len(side) != len(top.Results) {
		t.Fatalf("sidebar lists %d status values %v, top gives %d", len(side), side, len(top.Results))
	}
	for i, r := range top.Results {
		if side[i].Value != fmt.Sprint(r["status"]) || side[i].Count != fmt.Sprint(r["count"]) {
			t.Fatalf("sidebar value %d is %s (%s), top's is %v (%v)", i, side[i].Value, side[i].Count, r["status"], r["count"])
		}
	}
	browsertest.Screenshot(t, ctx, "search-events.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#fields section[data-field="status"] a.fv[data-value="404"]`))); err != nil {
		t.Fatal(err)
	}
	browsertest.Poll(t, 20*time.Second, func() error {
		var q, n string
		browsertest.Eval(ctx, `document.getElementById("q").value`, &q)
		browsertest.Eval(ctx, `document.getElementById("n-events").textContent`, &n)
		if q != "index=main status=404" || n != "(25)" {
			return fmt.Errorf("query %q, events %s", q, n)
		}
		return nil
	})
}

// A stats … by search draws one bar per group (screenshot of the chart).
func TestBrowserStatsByChart(t *testing.T) {
	s := startStack(t)
	ctx := browsertest.New(t, 60*time.Second)
	q := "index=main | stats count by status"
	open(t, ctx, s, q)
	waitDone(t, ctx)
	var vals map[string]float64
	browsertest.Poll(t, 10*time.Second, func() error {
		if err := browsertest.Eval(ctx, `Object.fromEntries(Array.from(document.querySelectorAll("#chart-svg rect.bar")).map(r => [r.dataset.key, +r.dataset.value]))`, &vals); err != nil {
			return err
		}
		if len(vals) != len(statusCounts) {
			return fmt.Errorf("bars %v", vals)
		}
		return nil
	})
	for _, sc := range statusCounts {
		if vals[sc.Status] != float64(sc.N) {
			t.Fatalf("bar for status %s shows %v, want %d", sc.Status, vals[sc.Status], sc.N)
		}
	}
	browsertest.Screenshot(t, ctx, "search-stats-chart.png")
}

// Results show as they arrive: a server that sends three result lines and
// then holds the summary back has the page show the three events while it
// still says it is searching; the summary line then completes it.
func TestBrowserResultsStreamIn(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/search", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, `{"_time":"2026-01-01T00:00:0%d.000000000Z","_raw":"streamed %d","host":"h","index":"main"}`+"\n", i, i)
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintln(w, `{"summary":{"buckets":{"total":1,"successful":1,"skipped":0,"failed":0,"missing":0,"failures":[]},"generation":7,"peers":["p1"],"partial":false,"warnings":[],"took_ms":1}}`)
	})
	mux.Handle("/", ui.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	ctx := browsertest.New(t, 60*time.Second)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/?range=all&q=streamed")); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Events  int
		Status  string
		Summary string
	}
	read := func() view {
		var v view
		browsertest.Eval(ctx, `({events: document.querySelectorAll("#events li.event").length, status: document.getElementById("status").textContent, summary: document.getElementById("summary").textContent})`, &v)
		return v
	}
	browsertest.Poll(t, 10*time.Second, func() error {
		if v := read(); v.Events != 3 || v.Status != "searching…" || v.Summary != "" {
			return fmt.Errorf("before the summary: %+v", v)
		}
		return nil
	})
	close(release)
	browsertest.Poll(t, 10*time.Second, func() error {
		v := read()
		if v.Events != 3 || !strings.HasPrefix(v.Status, "3 results in ") || !strings.Contains(v.Summary, "generation 7") {
			return fmt.Errorf("after the summary: %+v", v)
		}
		return nil
	})
}

// A timechart of many series stays readable (issue 29 item 5): its
// columns are stacked (each span one column whose segments add up to the
// span's total), no two series share a colour, the default limit=10 folds
// the rest into OTHER, and a click on a legend item hides that series and
// a second click shows it again.
func TestBrowserTimechartManySeries(t *testing.T) {
	s := startStack(t)
	ctx := browsertest.New(t, 60*time.Second)
	base := `index=main | rex "item/(?<item>\d+)" | eval it="i".(item % 15) | timechart span=10m count by it`
	type seg struct {
		Series string  `json:"series"`
		Key    string  `json:"key"`
		Value  float64 `json:"value"`
		Height float64 `json:"height"`
		Fill   string  `json:"fill"`
	}
	bars := func(want int) []seg {
		var out []seg
		browsertest.Poll(t, 10*time.Second, func() error {
			if err := browsertest.Eval(ctx, `Array.from(document.querySelectorAll("#chart-svg rect.bar")).map(r => ({series: r.dataset.series, key: r.dataset.key, value: +r.dataset.value, height: +r.getAttribute("height"), fill: r.getAttribute("fill")}))`, &out); err != nil {
				return err
			}
			series := map[string]bool{}
			for _, b := range out {
				series[b.Series] = true
			}
			if len(series) != want {
				return fmt.Errorf("%d series drawn, want %d", len(series), want)
			}
			return nil
		})
		return out
	}
	open(t, ctx, s, base+" limit=0")
	waitDone(t, ctx)
	all := bars(15)
	var stacked string
	browsertest.Eval(ctx, `document.getElementById("chart-svg").dataset.stacked`, &stacked)
	if stacked != "true" {
		t.Fatalf("a 15-series timechart is not stacked (data-stacked %q)", stacked)
	}
	fills := map[string]string{}
	total := map[string]float64{}
	for _, b := range all {
		if f, ok := fills[b.Series]; ok && f != b.Fill {
			t.Fatalf("series %s drawn in two colours", b.Series)
		}
		fills[b.Series] = b.Fill
		total[b.Key] += b.Value
	}
	seen := map[string]string{}
	for sr, f := range fills {
		if other, dup := seen[f]; dup {
			t.Fatalf("series %s and %s share the colour %s", sr, other, f)
		}
		seen[f] = sr
	}
	var events float64
	for _, n := range total {
		events += n
	}
	want := 0
	for _, sc := range statusCounts {
		want += sc.N
	}
	if int(events) != want {
		t.Fatalf("the stacked segments add up to %v events, want %d", events, want)
	}
	browsertest.Screenshot(t, ctx, "search-timechart-stacked.png")

	// Legend toggle: i0 off, then on again.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.legend-item[data-series="i0"]`))); err != nil {
		t.Fatal(err)
	}
	for _, b := range bars(14) {
		if b.Series == "i0" {
			t.Fatal("series i0 still drawn after its legend item was clicked")
		}
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.legend-item[data-series="i0"]`))); err != nil {
		t.Fatal(err)
	}
	bars(15)

	// The default limit: ten series and OTHER.
	open(t, ctx, s, base)
	waitDone(t, ctx)
	other := false
	for _, b := range bars(11) {
		other = other || b.Series == "OTHER"
	}
	if !other {
		t.Fatal("no OTHER series under the default limit=10")
	}
}

// The page's time range starts on "All time", the default of the HTTP API
// and `quarry search` too (issue 29: the same query gave two answers).
func TestBrowserDefaultRangeIsAllTime(t *testing.T) {
	s := startStack(t)
	ctx := browsertest.New(t, 60*time.Second)
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/")); err != nil {
		t.Fatal(err)
	}
	var r string
	browsertest.Poll(t, 10*time.Second, func() error {
		if err := browsertest.Eval(ctx, `document.getElementById("range").value`, &r); err != nil {
			return err
		}
		if r != "all" {
			return fmt.Errorf("the time range starts on %q", r)
		}
		return nil
	})
}
