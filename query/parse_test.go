package query

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// nodeString renders a search expression for table tests.
func nodeString(n Node) string {
	switch x := n.(type) {
	case nil:
		return "*"
	case AndNode:
		return "(" + nodeString(x.L) + " AND " + nodeString(x.R) + ")"
	case OrNode:
		return "(" + nodeString(x.L) + " OR " + nodeString(x.R) + ")"
	case NotNode:
		return "NOT " + nodeString(x.X)
	case TermNode:
		if x.Quoted {
			return fmt.Sprintf("%q", x.Text)
		}
		return x.Text
	case FieldNode:
		return x.Field + x.Op + "[" + x.Value + "]"
	}
	return "?"
}

func TestParseSearch(t *testing.T) {
	cases := []struct{ q, want, e, l string }{
		{"", "*", "", ""},
		{"error", "error", "", ""},
		{"search error", "error", "", ""},
		{"error timeout", "(error AND timeout)", "", ""},
		{"a OR b c", "((a OR b) AND c)", "", ""},
		{"a b OR c", "(a AND (b OR c))", "", ""},
		{"NOT a OR b", "(NOT a OR b)", "", ""},
		{"a AND NOT (b OR c)", "(a AND NOT (b OR c))", "", ""},
		{`"upstream error" err*`, `("upstream error" AND err*)`, "", ""},
		{"status=5* host!=web-01", "(status=[5*] AND host!=[web-01])", "", ""},
		{"bytes>=1000 rt<5", "(bytes>=[1000] AND rt<[5])", "", ""},
		{`msg="upstream error: timed out"`, "msg=[upstream error: timed out]", "", ""},
		{"index=main sourcetype=nginx:access", "(index=[main] AND sourcetype=[nginx:access])", "", ""},
		{"earliest=-15m latest=now error", "error", "-15m", "now"},
		{"earliest=2026-01-01T05:00:00Z latest=2026-01-01T06:00:00Z", "*", "2026-01-01T05:00:00Z", "2026-01-01T06:00:00Z"},
		{"192.168.1.1 /api/v1/cart", "(192.168.1.1 AND /api/v1/cart)", "", ""},
		{"x==1", "x=[1]", "", ""},
		{"and or not", "((and AND or) AND not)", "", ""},
	}
	for _, c := range cases {
		q, err := Parse(c.q)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.q, err)
			continue
		}
		if got := nodeString(q.Search); got != c.want {
			t.Errorf("Parse(%q) = %s, want %s", c.q, got, c.want)
		}
		if q.Earliest != c.e || q.Latest != c.l {
			t.Errorf("Parse(%q) time = %q..%q, want %q..%q", c.q, q.Earliest, q.Latest, c.e, c.l)
		}
	}
}

func TestParseCommands(t *testing.T) {
	cases := []struct {
		q    string
		want string // %#v-ish summary of the first command
	}{
		{"| stats count", "stats [count] by []"},
		{"* | stats count, dc(host) as hosts, perc95(bytes), avg(rt) by host, status", "stats [count dc(host)->hosts perc95(bytes) avg(rt)] by [host status]"},
		{"| stats values(path) earliest(_raw) latest(_raw) min(x) max(x) sum(x) median(x)", "stats [values(path) earliest(_raw) latest(_raw) min(x) max(x) sum(x) perc50(x)] by []"},
		{"| top limit=10 path", "top 10 [path] by [] count percent"},
		{"| rare limit=3 countfield=n showperc=false method by host", "rare 3 [method] by [host] n -"},
		{"| timechart span=5m count by host", "timechart 300s [count] by host"},
		{"| timechart avg(bytes)", "timechart 3600s [avg(bytes)] by "},
		{"| sort - count, +host num(bytes)", "sort 10000 [-count +host +bytes(num)]"},
		{"| sort 0 x desc", "sort 0 [-x]"},
		{"| head 5", "head 5"},
		{"| head", "head 10"},
		{"| tail limit=3", "tail 3"},
		{"| dedup 2 host, status keepempty=true", "dedup 2 [host status] true"},
		{"| fields - _raw, host", "fields -[_raw host]"},
		{"| fields host status", "fields +[host status]"},
		{"| table _time host *", "table [_time host *]"},
		{`| rex field=_raw "rt=(?<rtms>\d+)ms"`, "rex _raw rt=(?<rtms>\\d+)ms"},
		{`| eval a = 1 + 2 * 3, b = if(a > 5, "big", "small")`, "eval [a b]"},
		{`| where status >= 500 AND like(path, "/api/%")`, "where"},
		{`| search host=web-01`, "search"},
	}
	for _, c := range cases {
		q, err := Parse(c.q)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.q, err)
			continue
		}
		if len(q.Commands) != 1 {
			t.Errorf("Parse(%q): %d commands", c.q, len(q.Commands))
			continue
		}
		if got := cmdString(q.Commands[0]); got != c.want {
			t.Errorf("Parse(%q) = %s, want %s", c.q, got, c.want)
		}
	}
}

func cmdString(c Command) string {
	aggs := func(a []AggSpec) string {
		var s []string
		for _, x := range a {
			n := aggName(AggSpec{Func: x.Func, Field: x.Field, Perc: x.Perc})
			if x.As != "" {
				n += "->" + x.As
			}
			s = append(s, n)
		}
		return "[" + strings.Join(s, " ") + "]"
	}
	switch x := c.(type) {
	case StatsCmd:
		return fmt.Sprintf("stats %s by %v", aggs(x.Aggs), x.By)
	case TopCmd:
		pf := x.PercentField
		if !x.ShowPerc {
			pf = "-"
		}
		return fmt.Sprintf("%s %d %v by %v %s %s", x.Name(), x.Limit, x.Fields, x.By, x.CountField, pf)
	case TimechartCmd:
		return fmt.Sprintf("timechart %ds %s by %s", x.Span/1e9, aggs(x.Aggs), x.By)
	case SortCmd:
		var ks []string
		for _, k := range x.Keys {
			s := "+"
			if k.Desc {
				s = "-"
			}
			s += k.Field
			if k.Mode != "" {
				s += "(" + k.Mode + ")"
			}
			ks = append(ks, s)
		}
		return fmt.Sprintf("sort %d [%s]", x.Limit, strings.Join(ks, " "))
	case HeadCmd:
		return fmt.Sprintf("head %d", x.N)
	case TailCmd:
		return fmt.Sprintf("tail %d", x.N)
	case DedupCmd:
		return fmt.Sprintf("dedup %d %v %v", x.N, x.Fields, x.KeepEmpty)
	case FieldsCmd:
		s := "+"
		if x.Remove {
			s = "-"
		}
		return fmt.Sprintf("fields %s%v", s, x.Fields)
	case TableCmd:
		return fmt.Sprintf("table %v", x.Fields)
	case RexCmd:
		return fmt.Sprintf("rex %s %s", x.Field, x.Re)
	case EvalCmd:
		var fs []string
		for _, a := range x.Assign {
			fs = append(fs, a.Field)
		}
		return fmt.Sprintf("eval %v", fs)
	}
	return c.Name()
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		q        string
		pos      int
		expected string
	}{
		{`"unclosed`, 0, "a closing quote"},
		{"a OR", 4, "a search term"},
		{"(a b", 4, `")"`},
		{"a )", 2, "a search term, AND, OR, NOT or a pipe"},
		{"status=", 7, `a value after "status="`},
		{"error | bogus x", 8, "a command"},
		{"error |", 7, "a command"},
		{"| stats", 7, "an aggregate"},
		{"| stats count by", 16, `a field name after "by"`},
		{"| stats sum", 11, `"(" and a field name after sum`},
		{"| stats nope(x)", 8, "an aggregate"},
		{"| top limit=x path", 12, "a number after limit="},
		{"| top", 5, "a field name"},
		{"| head x", 7, "a number of results"},
		{"| eval = 1", 7, "a field name to assign"},
		{"| eval x 1", 9, `"=" after "x"`},
		{"| eval x = (1 + ", 16, "an expression"},
		{"| eval x = nofunc(1)", 11, "a known function"},
		{"| where a = = 1", 12, "an expression"},
		{"| eval x = if(1, 2)", 11, "if with 3 to 3 arguments"},
		{"| timechart span=7q count", 17, "a span"},
		{"earliest=-3x error", 9, "a time"},
		{"a OR earliest=-1h", 5, "earliest=/latest= only at the top level"},
		{"NOT latest=now", 4, "earliest=/latest= only at the top level"},
		{`| rex "(unclosed"`, 6, "a valid regular expression"},
		{"| sort", 6, "a sort field"},
		{"| dedup", 7, "a field name"},
		{"| fields", 8, "a list of field names"},
		{"| search", 8, "a search expression"},
		{"x | search earliest=-1h", 10, "earliest=/latest= only in the first search"},
	}
	for _, c := range cases {
		_, err := Parse(c.q)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, want a SyntaxError", c.q, err)
			continue
		}
		if se.Pos != c.pos || !strings.HasPrefix(se.Expected, c.expected) {
			t.Errorf("Parse(%q) = pos %d expected %q, want pos %d expected %q", c.q, se.Pos, se.Expected, c.pos, c.expected)
		}
		if !strings.Contains(se.Error(), fmt.Sprintf("column %d", c.pos+1)) {
			t.Errorf("Parse(%q) message %q lacks its column", c.q, se.Error())
		}
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 3, 18, 14, 37, 21, 500, time.UTC) // a Wednesday
	cases := []struct{ in, want string }{
		{"now", "2026-03-18T14:37:21.0000005Z"},
		{"-15m", "2026-03-18T14:22:21.0000005Z"},
		{"-1h@h", "2026-03-18T13:00:00Z"},
		{"@d", "2026-03-18T00:00:00Z"},
		{"-1d@d+2h", "2026-03-17T02:00:00Z"},
		{"@w0", "2026-03-15T00:00:00Z"},
		{"@w1", "2026-03-16T00:00:00Z"},
		{"-1mon@mon", "2026-02-01T00:00:00Z"},
		{"@y", "2026-01-01T00:00:00Z"},
		{"+30s", "2026-03-18T14:37:51.0000005Z"},
		{"2026-01-01T05:00:00Z", "2026-01-01T05:00:00Z"},
		{"2026-01-01T05:00:00.123456789+01:00", "2026-01-01T04:00:00.123456789Z"},
		{"1767225600", "2026-01-01T00:00:00Z"},
	}
	for _, c := range cases {
		got, err := ParseTime(c.in, now)
		if err != nil {
			t.Errorf("ParseTime(%q): %v", c.in, err)
			continue
		}
		if s := got.Format(time.RFC3339Nano); s != c.want {
			t.Errorf("ParseTime(%q) = %s, want %s", c.in, s, c.want)
		}
	}
	for _, bad := range []string{"", "-", "-5q", "@x", "yesterday", "5m"} {
		if _, err := ParseTime(bad, now); err == nil {
			t.Errorf("ParseTime(%q) succeeded, want an error", bad)
		}
	}
}

func TestEvalExpressions(t *testing.T) {
	row := Row{F: map[string]any{"status": "503", "path": "/api/v1/cart", "bytes": "1200", "name": "Web-01", "mv": []string{"a", "b"}}}
	cases := []struct{ expr, want string }{
		{"1 + 2 * 3", "7"},
		{"(1 + 2) * 3", "9"},
		{"10 % 4", "2"},
		{"7 / 2", "3.5"},
		{"1 / 0", "<nil>"},
		{"status + 1", "504"},
		{`"a" . "b" . 1`, "ab1"},
		{`"x" + "y"`, "xy"},
		{"-bytes", "-1200"},
		{"status >= 500 AND status < 600", "true"},
		{`status = "503"`, "true"},
		{"missing + 1", "<nil>"},
		{"missing = 1", "false"},
		{`if(status >= 500, "err", "ok")`, "err"},
		{`case(status < 400, "ok", status < 500, "client", true, "server")`, "server"},
		{"coalesce(missing, bytes)", "1200"},
		{"len(path)", "12"},
		{"lower(name) . upper(name)", "web-01WEB-01"},
		{`substr(path, 2, 3)`, "api"},
		{`substr(path, -4)`, "cart"},
		{"round(3.14159, 2)", "3.14"},
		{"round(2.5)", "3"},
		{`tostring(1234567, "commas")`, "1,234,567"},
		{`tostring(255, "hex")`, "0xFF"},
		{`tonumber("42") + 1`, "43"},
		{`tonumber("ff", 16)`, "255"},
		{`like(path, "/api/%")`, "true"},
		{`path LIKE "%cart"`, "true"},
		{`match(path, "^/api/v[0-9]+/")`, "true"},
		{`replace(path, "v1", "v2")`, "/api/v2/cart"},
		{"isnull(missing) AND isnotnull(path)", "true"},
		{"NOT isnum(path) XOR false", "true"},
		{"mvcount(mv)", "2"},
		{"max(3, 10, 2) - min(4, 1)", "9"},
		{"abs(-2) + floor(1.7) + ceil(1.2)", "5"},
		{"pow(2, 10)", "1024"},
		{"log(100)", "2"},
		{`trim("  x  ")`, "x"},
		{"'status' * 2", "1006"},
	}
	for _, c := range cases {
		e, err := parseExpr(c.expr, c.expr, 0)
		if err != nil {
			t.Errorf("parseExpr(%q): %v", c.expr, err)
			continue
		}
		v := e.Eval(&evalEnv{row: &row, now: fixedNow})
		got := "<nil>"
		if v != nil {
			got, _ = str(v)
		}
		if got != c.want {
			t.Errorf("eval %q = %s, want %s", c.expr, got, c.want)
		}
	}
}

func TestExtraction(t *testing.T) {
	f := map[string]any{"host": "h"}
	extractFields(`a=1 b="two words" host=other c=x,d=y;e=z rt=12ms k=v1 k=v2 =nokey 9x=no`, f)
	want := map[string]any{"host": "h", "a": "1", "b": "two words", "c": "x", "d": "y", "e": "z", "rt": "12ms", "k": []string{"v1", "v2"}, "x": "no"}
	if fmt.Sprint(f) != fmt.Sprint(want) {
		t.Errorf("kv extraction = %v, want %v", f, want)
	}
	g := map[string]any{}
	extractFields(`{"user":{"name":"ann","id":7},"tags":["a","b"],"ok":true,"n":null}`, g)
	wantJ := map[string]any{"user.name": "ann", "user.id": "7", "tags": []string{"a", "b"}, "ok": "true"}
	if fmt.Sprint(g) != fmt.Sprint(wantJ) {
		t.Errorf("json extraction = %v, want %v", g, wantJ)
	}
}

// Deep nesting is a syntax error, fast, never a stack overflow (SPEC §11):
// parentheses, NOT, unary minus and function calls (review N1: ln(ln(…)),
// if(…), case(…) skipped the cap) count under MaxNesting.
func TestNestingLimit(t *testing.T) {
	deep := strings.Repeat("(", 100000) + "a" + strings.Repeat(")", 100000)
	nots := strings.Repeat("NOT ", 60000) + "a"
	evalDeep := "* | eval x=" + strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000)
	whereNot := "* | where " + strings.Repeat("NOT ", 5000) + "x=1"
	neg := "* | eval x=" + strings.Repeat("-", 5000) + "1"
	lns := "* | eval x=" + strings.Repeat("ln(", 60000) + "1" + strings.Repeat(")", 60000)
	ifs := "* | where " + strings.Repeat("if(true,", 20000) + "1" + strings.Repeat(",2)", 20000) + "=1"
	cases := "* | eval x=" + strings.Repeat("case(x=1,", 20000) + "1" + strings.Repeat(")", 20000)
	mixed := "* | eval x=" + strings.Repeat("len((-", 40) + "1" + strings.Repeat("))", 40)
	for _, q := range []string{deep, nots, evalDeep, whereNot, neg, lns, ifs, cases, mixed} {
		_, err := Parse(q)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Error(), "levels of nesting") {
			t.Fatalf("query of %d bytes: err %v, want a nesting syntax error", len(q), err)
		}
		if se.Pos <= 0 || se.Pos >= len(q) {
			t.Fatalf("query of %d bytes: position %d", len(q), se.Pos)
		}
	}
	ok := strings.Repeat("(", MaxNesting) + "a" + strings.Repeat(")", MaxNesting)
	if _, err := Parse(ok); err != nil {
		t.Fatalf("%d levels: %v", MaxNesting, err)
	}
	okCalls := "* | eval x=" + strings.Repeat("ln(", MaxNesting) + "1" + strings.Repeat(")", MaxNesting)
	if _, err := Parse(okCalls); err != nil {
		t.Fatalf("%d nested calls: %v", MaxNesting, err)
	}
}

// A chain of operators is as deep as it is long for eval and the matcher:
// past MaxHeight it is a syntax error at the operator, below it it parses.
func TestHeightLimit(t *testing.T) {
	for _, q := range []string{
		"* | eval x=1" + strings.Repeat("+1", MaxHeight),
		"* | eval x=a" + strings.Repeat(`."-"`, MaxHeight),
		"* | where x=1" + strings.Repeat(" OR x=1", MaxHeight),
		"a" + strings.Repeat(" OR a", MaxHeight),
		"a" + strings.Repeat(" a", MaxHeight),
		"* | eval x=len(" + strings.Repeat("1+", MaxHeight) + "1)",
	} {
		_, err := Parse(q)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Error(), "operators deep") {
			t.Fatalf("query of %d bytes: err %v, want a height syntax error", len(q), err)
		}
		if se.Pos <= 0 || se.Pos >= len(q) {
			t.Fatalf("query of %d bytes: position %d", len(q), se.Pos)
		}
	}
	for _, q := range []string{
		"* | eval x=1" + strings.Repeat("+1", MaxHeight-2),
		"a" + strings.Repeat(" OR a", MaxHeight-2),
	} {
		if _, err := Parse(q); err != nil {
			t.Fatalf("query of %d bytes: %v", len(q), err)
		}
	}
}

// The review's N1 request (half a million ln( levels, 2 MB) and anything
// past MaxQueryBytes is refused at once with a syntax error at the cap.
func TestQueryTextLimit(t *testing.T) {
	n := 500000
	review := "* | eval x=" + strings.Repeat("ln(", n) + "1" + strings.Repeat(")", n)
	_, err := Parse(review)
	var se *SyntaxError
	if !errors.As(err, &se) || se.Pos != MaxQueryBytes || !strings.Contains(se.Error(), "at most 262144 bytes") {
		t.Fatalf("2 MB query: err %v, want a size syntax error at %d", err, MaxQueryBytes)
	}
	if _, err := Parse("a " + strings.Repeat(" ", MaxQueryBytes-2)); err != nil {
		t.Fatalf("a query of exactly MaxQueryBytes: %v", err)
	}
}
