package query

// The pipeline commands' arguments: a small tokenizer (lexArgs), an
// argument reader (argParser) and one parser per command, looked up by
// name in commandParsers; aggregate lists (aggList) and their names.

import (
	"fmt"
	"github.com/quarry-dev/quarry/knowledge"
	"strconv"
	"strings"
)

type atok struct {
	kind byte // 'w' word, 's' string, '=', ',', '(', ')', 0 eof
	text string
	pos  int
}

type argParser struct {
	q    string
	toks []atok
	i    int
	end  int
	cmd  string
}

func lexArgs(s string, base int) []atok {
	var out []atok
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			return out
		}
		c := s[i]
		switch c {
		case '=', ',', '(', ')':
			out = append(out, atok{c, string(c), base + i})
			i++
			continue
		case '"':
			str, n := unquote(s[i:])
			out = append(out, atok{'s', str, base + i})
			i += n
			continue
		}
		st := i
		for i < len(s) && !isSpace(s[i]) && !strings.ContainsRune("=,()\"", rune(s[i])) {
			i++
		}
		out = append(out, atok{'w', s[st:i], base + st})
	}
}

func (a *argParser) peekTok() atok {
	if a.i < len(a.toks) {
		return a.toks[a.i]
	}
	return atok{pos: a.end}
}

func (a *argParser) nextTok() atok {
	t := a.peekTok()
	if a.i < len(a.toks) {
		a.i++
	}
	return t
}

func (a *argParser) errAt(t atok, expected string) error {
	return &SyntaxError{Query: a.q, Pos: t.pos, Expected: expected, Found: describe(t.text)}
}

func (a *argParser) done() bool { return a.i >= len(a.toks) }

// option reads `name=value` if the next tokens are one of the names.
func (a *argParser) option(names ...string) (string, atok, bool) {
	t := a.peekTok()
	if t.kind != 'w' || a.i+1 >= len(a.toks) || a.toks[a.i+1].kind != '=' {
		return "", atok{}, false
	}
	for _, n := range names {
		if strings.EqualFold(t.text, n) {
			a.i += 2
			v := a.nextTok()
			return n, v, true
		}
	}
	return "", atok{}, false
}

func (a *argParser) intVal(t atok, what string) (int, error) {
	n, err := strconv.Atoi(t.text)
	if err != nil || n < 0 || t.kind != 'w' {
		return 0, a.errAt(t, what)
	}
	return n, nil
}

func boolVal(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "true", "t", "1", "yes":
		return true, true
	case "false", "f", "0", "no":
		return false, true
	}
	return false, false
}

// fieldList reads field names separated by spaces or commas until a stop word.
func (a *argParser) fieldList(stop ...string) []string {
	var out []string
	for !a.done() {
		t := a.peekTok()
		if t.kind == ',' {
			a.i++
			continue
		}
		if t.kind != 'w' && t.kind != 's' {
			break
		}
		isStop := false
		for _, s := range stop {
			if strings.EqualFold(t.text, s) {
				isStop = true
			}
		}
		if isStop || (a.i+1 < len(a.toks) && a.toks[a.i+1].kind == '=') {
			break
		}
		out = append(out, t.text)
		a.i++
	}
	return out
}

// commandParsers are the parsers of the commands of SPEC §5, by lower-case
// name: each reads its command's arguments (a holds them as tokens, rest and
// restPos as text, for the commands that parse an expression).
var commandParsers = map[string]func(a *argParser, rest string, restPos int) (Command, error){
	"search":    parseSearchCmd,
	"where":     parseWhereCmd,
	"eval":      parseEvalCmd,
	"fields":    parseFieldsCmd,
	"table":     parseTableCmd,
	"rex":       parseRexCmd,
	"stats":     parseStatsCmd,
	"timechart": parseTimechartCmd,
	"top":       parseTopCmd,
	"rare":      parseTopCmd,
	"sort":      parseSortCmd,
	"head":      parseHeadTailCmd,
	"tail":      parseHeadTailCmd,
	"dedup":     parseDedupCmd,
	"lookup":    parseLookupCmd,
}

// parseCommand parses one pipe segment with its command's parser.
func parseCommand(q string, s pipeSeg) (Command, error) {
	name, rest := firstWord(s.text)
	namePos := s.pos + strings.Index(s.text, name)
	if name == "" {
		return nil, &SyntaxError{Query: q, Pos: s.pos + len(s.text), Expected: commandList, Found: describe(strings.TrimSpace(s.text))}
	}
	restPos := namePos + len(name)
	a := &argParser{q: q, toks: lexArgs(rest, restPos), end: s.pos + len(s.text), cmd: name}
	parse, ok := commandParsers[strings.ToLower(name)]
	if !ok {
		return nil, &SyntaxError{Query: q, Pos: namePos, Expected: commandList, Found: describe(name)}
	}
	return parse(a, rest, restPos)
}

// parseSearchCmd: search <expression>, without earliest=/latest=.
func parseSearchCmd(a *argParser, rest string, restPos int) (Command, error) {
	q := a.q
	p := &searchParser{q: q, src: rest, base: restPos}
	n, err := p.parseAll()
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, &SyntaxError{Query: q, Pos: a.end, Expected: "a search expression after search", Found: "end of command"}
	}
	var tq Query
	if _, err := liftTimeMods(q, n, &tq); err != nil {
		return nil, err
	}
	if tq.Earliest != "" || tq.Latest != "" {
		return nil, &SyntaxError{Query: q, Pos: restPos, Expected: "earliest=/latest= only in the first search, before any pipe", Found: describe(strings.TrimSpace(rest))}
	}
	return SearchCmd{Expr: n, compiled: compileNode(n)}, nil
}

// parseWhereCmd: where <eval expression>.
func parseWhereCmd(a *argParser, rest string, restPos int) (Command, error) {
	e, err := parseExpr(a.q, rest, restPos)
	if err != nil {
		return nil, err
	}
	return WhereCmd{e}, nil
}

// parseEvalCmd: eval field=expr [, field=expr]….
func parseEvalCmd(a *argParser, rest string, restPos int) (Command, error) {
	return parseEval(a.q, rest, restPos)
}

// parseFieldsCmd: fields [+|-] field….
func parseFieldsCmd(a *argParser, rest string, restPos int) (Command, error) {
	c := FieldsCmd{}
	t := a.peekTok()
	if t.kind == 'w' && (t.text == "-" || t.text == "+") {
		c.Remove = t.text == "-"
		a.i++
	} else if t.kind == 'w' && len(t.text) > 1 && (t.text[0] == '-' || t.text[0] == '+') {
		c.Remove = t.text[0] == '-'
		a.toks[a.i].text = t.text[1:]
	}
	c.Fields = a.fieldList()
	if len(c.Fields) == 0 || !a.done() {
		return nil, a.errAt(a.peekTok(), "a list of field names")
	}
	return c, nil
}

// parseTableCmd: table field….
func parseTableCmd(a *argParser, rest string, restPos int) (Command, error) {
	c := TableCmd{Fields: a.fieldList()}
	if len(c.Fields) == 0 || !a.done() {
		return nil, a.errAt(a.peekTok(), "a list of field names")
	}
	return c, nil
}

// parseRexCmd: rex [field=f] "regex with named groups".
func parseRexCmd(a *argParser, rest string, restPos int) (Command, error) {
	q := a.q
	c := RexCmd{Field: "_raw"}
	for !a.done() {
		if _, v, ok := a.option("field"); ok {
			if v.kind != 'w' {
				return nil, a.errAt(v, "a field name after field=")
			}
			c.Field = v.text
			continue
		}
		t := a.nextTok()
		if t.kind != 's' || c.Re != nil {
			return nil, a.errAt(t, `a quoted regular expression with named groups, like "(?<user>\w+)"`)
		}
		re, err := compileRegex(t.text)
		if err != nil {
			return nil, regexSyntaxError(q, t.pos, err)
		}
		c.Re = re
	}
	if c.Re == nil {
		return nil, a.errAt(a.peekTok(), "a quoted regular expression")
	}
	c.fast = compileLitGroup(c.Re)
	return c, nil
}

// parseStatsCmd: stats agg… [by field…].
func parseStatsCmd(a *argParser, rest string, restPos int) (Command, error) {
	aggs, err := a.aggList(false)
	if err != nil {
		return nil, err
	}
	c := StatsCmd{Aggs: aggs}
	if t := a.peekTok(); t.kind == 'w' && strings.EqualFold(t.text, "by") {
		a.i++
		c.By = a.fieldList()
		if len(c.By) == 0 {
			return nil, a.errAt(a.peekTok(), `a field name after "by"`)
		}
	}
	if !a.done() {
		return nil, a.errAt(a.peekTok(), `"by", "as", an aggregate or the end of the command`)
	}
	return c, nil
}

// parseTimechartCmd: timechart [options] agg… [by field [options]], the
// options span=, limit=, useother=, otherstr=.
func parseTimechartCmd(a *argParser, rest string, restPos int) (Command, error) {
	c := TimechartCmd{Span: int64(60 * 60 * 1e9), Limit: 10, UseOther: true, OtherStr: "OTHER"}
	if err := c.options(a); err != nil {
		return nil, err
	}
	aggs, err := a.aggList(true)
	if err != nil {
		return nil, err
	}
	c.Aggs = aggs
	if t := a.peekTok(); t.kind == 'w' && strings.EqualFold(t.text, "by") {
		a.i++
		by := a.fieldList()
		if len(by) != 1 {
			return nil, a.errAt(a.peekTok(), `one field after "by"`)
		}
		c.By = by[0]
		if len(c.Aggs) > 1 {
			return nil, a.errAt(a.peekTok(), "a single aggregate when timechart splits by a field")
		}
		// Splunk takes the series options after the split field too
		// (… by host limit=0 useother=f).
		if err := c.options(a); err != nil {
			return nil, err
		}
	}
	if !a.done() {
		return nil, a.errAt(a.peekTok(), `"by" or the end of the command`)
	}
	return c, nil
}

// options reads timechart's name=value options: span, limit, useother,
// otherstr.
func (c *TimechartCmd) options(a *argParser) error {
	for {
		n, v, ok := a.option("span", "limit", "useother", "otherstr")
		if !ok {
			return nil
		}
		switch n {
		case "span":
			sp, err := parseSpan(v.text)
			if err != nil {
				return a.errAt(v, "a span like 1h, 5m, 30s or 1d")
			}
			c.Span = sp
		case "limit":
			l, err := a.intVal(v, "a number after limit=")
			if err != nil {
				return err
			}
			c.Limit = l
		case "useother":
			b, ok := boolVal(v.text)
			if !ok {
				return a.errAt(v, "true or false")
			}
			c.UseOther = b
		case "otherstr":
			if v.text == "" {
				return a.errAt(v, "a series name after otherstr=")
			}
			c.OtherStr = v.text
		}
	}
}

// parseTopCmd: top|rare [options] field… [by field…].
func parseTopCmd(a *argParser, rest string, restPos int) (Command, error) {
	c := TopCmd{Rare: strings.EqualFold(a.cmd, "rare"), Limit: 10, CountField: "count", PercentField: "percent", ShowCount: true, ShowPerc: true}
	inBy := false
	for !a.done() {
		n, v, ok := a.option("limit", "countfield", "percentfield", "showcount", "showperc")
		if !ok {
			if t := a.peekTok(); t.kind == 'w' && strings.EqualFold(t.text, "by") {
				if inBy || len(c.Fields) == 0 {
					return nil, a.errAt(t, "a field name")
				}
				a.i++
				inBy = true
				continue
			}
			fl := a.fieldList("by")
			if len(fl) == 0 {
				return nil, a.errAt(a.peekTok(), "a field name")
			}
			if inBy {
				c.By = append(c.By, fl...)
			} else {
				c.Fields = append(c.Fields, fl...)
			}
			continue
		}
		switch n {
		case "limit":
			l, err := a.intVal(v, "a number after limit=")
			if err != nil {
				return nil, err
			}
			c.Limit = l
		case "countfield":
			c.CountField = v.text
		case "percentfield":
			c.PercentField = v.text
		case "showcount", "showperc":
			b, ok := boolVal(v.text)
			if !ok {
				return nil, a.errAt(v, "true or false")
			}
			if n == "showcount" {
				c.ShowCount = b
			} else {
				c.ShowPerc = b
			}
		}
	}
	if len(c.Fields) == 0 {
		return nil, a.errAt(a.peekTok(), "a field name")
	}
	if inBy && len(c.By) == 0 {
		return nil, a.errAt(a.peekTok(), `a field name after "by"`)
	}
	return c, nil
}

// parseSortCmd: sort [N] [limit=N] [+|-][num(|str(]field…  [desc].
func parseSortCmd(a *argParser, rest string, restPos int) (Command, error) {
	c := SortCmd{Limit: 10000}
	if t := a.peekTok(); t.kind == 'w' {
		if n, err := strconv.Atoi(t.text); err == nil && n >= 0 {
			c.Limit = n
			a.i++
		}
	}
	if _, v, ok := a.option("limit"); ok {
		n, err := a.intVal(v, "a number after limit=")
		if err != nil {
			return nil, err
		}
		c.Limit = n
	}
	desc := false
	for !a.done() {
		t := a.nextTok()
		switch {
		case t.kind == ',':
			continue
		case t.kind == 'w' && (t.text == "-" || t.text == "+"):
			desc = t.text == "-"
			continue
		case t.kind == 'w' && strings.EqualFold(t.text, "desc") && a.done():
			for i := range c.Keys {
				c.Keys[i].Desc = !c.Keys[i].Desc
			}
			continue
		case t.kind == 'w' || t.kind == 's':
			k := SortKey{Field: t.text, Desc: desc}
			if t.kind == 'w' && len(k.Field) > 1 && (k.Field[0] == '-' || k.Field[0] == '+') {
				k.Desc = k.Field[0] == '-'
				k.Field = k.Field[1:]
			}
			if mode := strings.ToLower(k.Field); (mode == "num" || mode == "str" || mode == "auto" || mode == "ip") && a.peekTok().kind == '(' {
				a.i++
				f := a.nextTok()
				if f.kind != 'w' {
					return nil, a.errAt(f, "a field name")
				}
				if cl := a.nextTok(); cl.kind != ')' {
					return nil, a.errAt(cl, `")"`)
				}
				k.Field = f.text
				if mode == "num" || mode == "str" {
					k.Mode = mode
				}
			}
			c.Keys = append(c.Keys, k)
			desc = false
		default:
			return nil, a.errAt(t, "a sort field")
		}
	}
	if len(c.Keys) == 0 {
		return nil, a.errAt(a.peekTok(), "a sort field")
	}
	return c, nil
}

// parseHeadTailCmd: head|tail [N | limit=N].
func parseHeadTailCmd(a *argParser, rest string, restPos int) (Command, error) {
	n := 10
	if _, v, ok := a.option("limit"); ok {
		l, err := a.intVal(v, "a number after limit=")
		if err != nil {
			return nil, err
		}
		n = l
	} else if !a.done() {
		l, err := a.intVal(a.nextTok(), "a number of results")
		if err != nil {
			return nil, err
		}
		n = l
	}
	if !a.done() {
		return nil, a.errAt(a.peekTok(), "the end of the command")
	}
	if strings.EqualFold(a.cmd, "head") {
		return HeadCmd{n}, nil
	}
	return TailCmd{n}, nil
}

// parseDedupCmd: dedup [N] field… [keepempty=bool].
func parseDedupCmd(a *argParser, rest string, restPos int) (Command, error) {
	c := DedupCmd{N: 1}
	if t := a.peekTok(); t.kind == 'w' {
		if n, err := strconv.Atoi(t.text); err == nil && n > 0 {
			c.N = n
			a.i++
		}
	}
	for !a.done() {
		if _, v, ok := a.option("keepempty"); ok {
			b, ok := boolVal(v.text)
			if !ok {
				return nil, a.errAt(v, "true or false")
			}
			c.KeepEmpty = b
			continue
		}
		fl := a.fieldList()
		if len(fl) == 0 {
			return nil, a.errAt(a.peekTok(), "a field name or keepempty=")
		}
		c.Fields = append(c.Fields, fl...)
	}
	if len(c.Fields) == 0 {
		return nil, a.errAt(a.peekTok(), "a field name")
	}
	return c, nil
}

var aggFuncs = map[string]string{
	"count": "count", "c": "count", "sum": "sum", "avg": "avg", "mean": "avg",
	"min": "min", "max": "max", "dc": "dc", "distinct_count": "dc",
	"values": "values", "earliest": "earliest", "latest": "latest", "median": "perc",
}

// aggList reads fn[(field)] [as name] … until `by` or the end.
func (a *argParser) aggList(one bool) ([]AggSpec, error) {
	var out []AggSpec
	for !a.done() {
		t := a.peekTok()
		if t.kind == ',' {
			a.i++
			continue
		}
		if t.kind != 'w' || strings.EqualFold(t.text, "by") {
			break
		}
		a.i++
		fn := strings.ToLower(t.text)
		spec := AggSpec{}
		if f, ok := aggFuncs[fn]; ok {
			spec.Func = f
			if fn == "median" {
				spec.Perc = 50
			}
		} else if p, ok := percFunc(fn); ok {
			spec.Func = "perc"
			spec.Perc = p
		} else {
			return nil, a.errAt(t, "an aggregate (count, sum, avg, min, max, dc, values, earliest, latest, percN)")
		}
		if a.peekTok().kind == '(' {
			a.i++
			f := a.nextTok()
			if f.kind != 'w' && f.kind != 's' {
				return nil, a.errAt(f, "a field name")
			}
			spec.Field = f.text
			if c := a.nextTok(); c.kind != ')' {
				return nil, a.errAt(c, `")"`)
			}
		} else if spec.Func != "count" {
			return nil, a.errAt(a.peekTok(), fmt.Sprintf(`"(" and a field name after %s`, t.text))
		}
		if n := a.peekTok(); n.kind == 'w' && strings.EqualFold(n.text, "as") {
			a.i++
			nm := a.nextTok()
			if nm.kind != 'w' && nm.kind != 's' {
				return nil, a.errAt(nm, "a name after as")
			}
			spec.As = nm.text
		}
		out = append(out, spec)
	}
	if len(out) == 0 {
		return nil, a.errAt(a.peekTok(), "an aggregate (count, sum, avg, min, max, dc, values, earliest, latest, percN)")
	}
	return out, nil
}

func percFunc(fn string) (float64, bool) {
	var s string
	switch {
	case strings.HasPrefix(fn, "perc"):
		s = fn[4:]
	case strings.HasPrefix(fn, "p") && len(fn) > 1:
		s = fn[1:]
	default:
		return 0, false
	}
	p, err := strconv.ParseFloat(s, 64)
	if err != nil || p < 0 || p > 100 {
		return 0, false
	}
	return p, true
}

// aggName is the column an aggregate produces.
func aggName(a AggSpec) string {
	if a.As != "" {
		return a.As
	}
	fn := a.Func
	if fn == "perc" {
		fn = "perc" + fmtNum(a.Perc)
	}
	if a.Field == "" {
		return fn
	}
	return fn + "(" + a.Field + ")"
}

// parseLookupCmd: lookup <table> <field> [AS <field>]… [OUTPUT|OUTPUTNEW
// <field> [AS <field>]…] — a table of the search's knowledge bundle
// (checked when the search is compiled with one).
func parseLookupCmd(a *argParser, rest string, restPos int) (Command, error) {
	l, err := knowledge.ParseLookupSpec(rest)
	if err != nil {
		return nil, &SyntaxError{Query: a.q, Pos: restPos, Expected: "lookup <table> <field> [AS <field>] [OUTPUT <field> [AS <field>]…]", Found: describe(strings.TrimSpace(rest))}
	}
	return LookupCmd{Spec: l}, nil
}
