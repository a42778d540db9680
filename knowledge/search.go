package knowledge

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The search-time knowledge bundle (SPEC §5, issue 28 item 2): what turns
// an event's text into fields when it is searched. A search head loads it
// from a folder (quarry searchhead --knowledge DIR, a standalone peer's
// --knowledge DIR), names it by content hash in every search, and peers
// fetch it by that hash. Supported, as Splunk writes them:
//
//   - props.conf, per [sourcetype] stanza over [default] (key by key):
//     EXTRACT-<class> = <regex with named groups> [in <field>];
//     REPORT-<class> = <transform>[, <transform>…] (transforms.conf stanzas
//     with REGEX and, optionally, FORMAT = name::$1 …; without FORMAT the
//     named groups name the fields); KV_MODE = auto | none | json
//     (auto_escaped reads as auto; anything else is refused);
//     FIELDALIAS-<class> = <field> AS <alias> […]; EVAL-<field> = <eval
//     expression> (compiled by the search language, which refuses a bad
//     one with the line); LOOKUP-<class> = <lookup> <field> [AS
//     <event field>] … [OUTPUT|OUTPUTNEW <field> [AS <event field>] …].
//     Within each kind, classes run in name order; the kinds run in
//     Splunk's order: EXTRACT, REPORT, KV_MODE, FIELDALIAS, EVAL, LOOKUP.
//     [source::] and [host::] stanzas are not supported for search time
//     (refused, so nothing is silently ignored).
//   - transforms.conf lookup stanzas: filename = <name>.csv, a file of
//     lookups/ in the bundle (header row, then rows; matched exactly, case
//     sensitive, on the input columns; a row matching several times gives a
//     multivalue output).
//   - eventtypes.conf: [name] search = <search>; `eventtype=name` (and
//     globs) in a search means that search.
//   - tags.conf: [eventtype=<name>] or [<field>=<value>] stanzas with
//     <tag> = enabled; `tag=<tag>` means any of them.
//
// Fields the bundle makes never replace the default fields or indexed
// fields (as for every search-time extraction in quarry); EVAL and LOOKUP
// OUTPUT replace other search-time fields, as in Splunk.

// MaxKnowledgeBytes bounds a knowledge bundle's files together (lookups
// included): one NATS message carries it to a peer.
const MaxKnowledgeBytes = 512 << 10

// Knowledge bundle files besides props.conf and transforms.conf.
const (
	EventtypesConf = "eventtypes.conf"
	TagsConf       = "tags.conf"
	LookupsDir     = "lookups/"
)

// LoadKnowledgeDir reads a knowledge bundle folder: props.conf,
// transforms.conf, eventtypes.conf, tags.conf (each optional) and
// lookups/*.csv, at most MaxKnowledgeBytes together.
func LoadKnowledgeDir(dir string) (Files, error) {
	f := Files{}
	total := 0
	read := func(name, path string) error {
		b, err := readLimited(path, MaxKnowledgeBytes-total)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		f[name] = b
		total += len(b)
		return nil
	}
	for _, name := range []string{PropsConf, TransformsConf, EventtypesConf, TagsConf} {
		if err := read(name, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	csvs, _ := filepath.Glob(filepath.Join(dir, "lookups", "*.csv"))
	sort.Strings(csvs)
	for _, p := range csvs {
		if err := read(LookupsDir+filepath.Base(p), p); err != nil {
			return nil, err
		}
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("%s holds no props.conf, transforms.conf, eventtypes.conf, tags.conf or lookups/*.csv", dir)
	}
	return f, nil
}

// SearchBundle is a parsed knowledge bundle. Immutable once parsed; safe
// for concurrent use.
type SearchBundle struct {
	hash string
	// rules by sourcetype ("" holds [default] alone, for any other).
	rules      map[string]*SearchRules
	lookups    map[string]*Lookup
	eventtypes map[string]string
	tags       map[string][]TagTarget
}

// SearchRules are one sourcetype's search-time operations, in order.
type SearchRules struct {
	Extracts []Extract
	KVMode   string // auto, none, json
	Aliases  []Alias
	Evals    []EvalDef
	Lookups  []AutoLookup
}

// Extract is an EXTRACT- regex or a REPORT- transform: named groups (or
// FORMAT pairs) become fields; In names the field it reads ("": _raw).
type Extract struct {
	Re     *regexp.Regexp
	In     string
	Format [][2]string // FORMAT name::value templates ($n, named groups)
}

// Alias is one FIELDALIAS- pair.
type Alias struct{ From, To string }

// EvalDef is one EVAL-<field>; Where names it for errors (props.conf:LINE).
type EvalDef struct{ Field, Expr, Where string }

// AutoLookup is one LOOKUP- (or the lookup command): match the table's In
// columns against the event's fields, set Out fields (only where absent
// with OutputNew). No Out: every column but the inputs.
type AutoLookup struct {
	Table     string
	In        []FieldMap
	Out       []FieldMap
	OutputNew bool
}

// FieldMap maps a lookup column to an event field.
type FieldMap struct{ Column, Field string }

// TagTarget is what a tag stands for: field=value (eventtype=name for an
// eventtype's tag).
type TagTarget struct{ Field, Value string }

// Hash is the content hash of the files the bundle came from.
func (b *SearchBundle) Hash() string { return b.hash }

// For returns the rules of a sourcetype (those of [default] when it has no
// stanza); nil when there are none.
func (b *SearchBundle) For(sourcetype string) *SearchRules {
	if r, ok := b.rules[sourcetype]; ok {
		return r
	}
	return b.rules[""]
}

// Sourcetypes lists the sourcetypes with a stanza of their own, sorted.
func (b *SearchBundle) Sourcetypes() []string {
	var out []string
	for _, st := range sortedStrKeys(b.rules) {
		if st != "" {
			out = append(out, st)
		}
	}
	return out
}

// HasRules reports whether any sourcetype has search-time operations.
func (b *SearchBundle) HasRules() bool { return len(b.rules) > 0 }

// EvalDefs lists every EVAL- of the bundle (for the search language to
// compile once).
func (b *SearchBundle) EvalDefs() []EvalDef {
	var out []EvalDef
	for _, st := range sortedStrKeys(b.rules) {
		out = append(out, b.rules[st].Evals...)
	}
	return out
}

// Lookup returns a lookup table by its transforms.conf name.
func (b *SearchBundle) Lookup(name string) (*Lookup, bool) {
	l, ok := b.lookups[name]
	return l, ok
}

// Eventtypes returns the searches of the eventtypes whose names match
// pattern (a glob with '*'), in name order.
func (b *SearchBundle) Eventtypes(pattern string) []string {
	var out []string
	for _, name := range sortedStrKeys(b.eventtypes) {
		if globName(pattern, name) {
			out = append(out, b.eventtypes[name])
		}
	}
	return out
}

// Tagged returns what the tags matching pattern stand for.
func (b *SearchBundle) Tagged(pattern string) []TagTarget {
	var out []TagTarget
	for _, tag := range sortedStrKeys(b.tags) {
		if globName(pattern, tag) {
			out = append(out, b.tags[tag]...)
		}
	}
	return out
}

// globName matches a name against a pattern whose '*' match any run.
func globName(pattern, name string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == name
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(name, parts[0]) {
		return false
	}
	name = name[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(name, p)
		}
		j := strings.Index(name, p)
		if j < 0 {
			return false
		}
		name = name[j+len(p):]
	}
	return true
}

func sortedStrKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Lookup is a CSV lookup table, indexed by column on first use.
type Lookup struct {
	Name    string
	Columns []string
	Rows    [][]string
	col     map[string]int
	index   map[int]map[string][]int
}

// Column returns a column's index, -1 when the table has none.
func (l *Lookup) Column(name string) int {
	if i, ok := l.col[name]; ok {
		return i
	}
	return -1
}

// Match returns the rows whose column c equals v.
func (l *Lookup) Match(c int, v string) []int { return l.index[c][v] }

// parseLookup reads a lookup CSV: a header row, then rows of its width.
func parseLookup(name string, b []byte) (*Lookup, error) {
	r := csv.NewReader(strings.NewReader(string(b)))
	r.FieldsPerRecord = 0
	recs, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: no header row", name)
	}
	l := &Lookup{Name: name, Columns: recs[0], Rows: recs[1:], col: map[string]int{}, index: map[int]map[string][]int{}}
	for i, c := range l.Columns {
		l.col[c] = i
		idx := map[string][]int{}
		for j, row := range l.Rows {
			idx[row[i]] = append(idx[row[i]], j)
		}
		l.index[i] = idx
	}
	return l, nil
}

// ParseSearchBundle parses and validates a knowledge bundle. Every error
// is named by file and line; a bundle with any error is refused whole.
func ParseSearchBundle(f Files) (*SearchBundle, error) {
	total := 0
	for name, data := range f {
		total += len(data)
		if name != PropsConf && name != TransformsConf && name != EventtypesConf && name != TagsConf &&
			!(strings.HasPrefix(name, LookupsDir) && strings.HasSuffix(name, ".csv") && !strings.Contains(name[len(LookupsDir):], "/")) {
			return nil, fmt.Errorf("%s: not a knowledge bundle file (props.conf, transforms.conf, eventtypes.conf, tags.conf, lookups/*.csv)", name)
		}
	}
	if total > MaxKnowledgeBytes {
		return nil, fmt.Errorf("knowledge bundle of %d bytes, over the %d-byte limit", total, MaxKnowledgeBytes)
	}
	b := &SearchBundle{hash: f.Hash(), rules: map[string]*SearchRules{}, lookups: map[string]*Lookup{},
		eventtypes: map[string]string{}, tags: map[string][]TagTarget{}}
	var errs []error
	transforms, err := ParseConf(TransformsConf, f[TransformsConf])
	if err != nil {
		return nil, err
	}
	byName := map[string]*Stanza{}
	for i := range transforms {
		byName[transforms[i].Name] = &transforms[i]
		if fn, ok := transforms[i].Get("filename"); ok {
			l, err := parseLookup(LookupsDir+fn, f[LookupsDir+fn])
			if f[LookupsDir+fn] == nil {
				err = fmt.Errorf("%s:%d: filename = %s: the bundle has no %s%s", TransformsConf, transforms[i].Line, fn, LookupsDir, fn)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			b.lookups[transforms[i].Name] = l
		}
	}
	props, err := ParseConf(PropsConf, f[PropsConf])
	if err != nil {
		return nil, err
	}
	var def *Stanza
	for i := range props {
		if props[i].Name == "default" {
			def = &props[i]
		}
	}
	for i := range props {
		st := &props[i]
		if strings.Contains(st.Name, "::") {
			if searchTimeKeys(st) {
				errs = append(errs, fmt.Errorf("%s:%d: [%s]: search-time settings are read per sourcetype only", PropsConf, st.Line, st.Name))
			}
			continue
		}
		name := st.Name
		if name == "default" {
			name = ""
		}
		r, es := b.parseRules(merged(def, st), byName)
		errs = append(errs, es...)
		if r != nil {
			b.rules[name] = r
		}
	}
	errs = append(errs, b.parseEventtypes(f[EventtypesConf])...)
	errs = append(errs, b.parseTags(f[TagsConf])...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b, nil
}

// merged layers a sourcetype stanza over [default], key by key.
func merged(def, st *Stanza) *Stanza {
	if def == nil || def == st {
		return st
	}
	out := &Stanza{Name: st.Name, Line: st.Line}
	seen := map[string]bool{}
	for _, kv := range st.Keys {
		seen[kv.Key] = true
		out.Keys = append(out.Keys, kv)
	}
	for _, kv := range def.Keys {
		if !seen[kv.Key] {
			out.Keys = append(out.Keys, kv)
		}
	}
	return out
}

// searchTimeKeys reports whether a stanza sets a search-time key.
func searchTimeKeys(st *Stanza) bool {
	for _, kv := range st.Keys {
		for _, p := range []string{"EXTRACT-", "REPORT-", "KV_MODE", "FIELDALIAS-", "EVAL-", "LOOKUP-"} {
			if strings.HasPrefix(kv.Key, p) {
				return true
			}
		}
	}
	return false
}

// parseRules reads one (merged) stanza's search-time keys; nil when it
// sets none.
func (b *SearchBundle) parseRules(st *Stanza, transforms map[string]*Stanza) (*SearchRules, []error) {
	r := &SearchRules{KVMode: "auto"}
	var errs []error
	at := func(kv KV) string { return fmt.Sprintf("%s:%d: %s", PropsConf, kv.Line, kv.Key) }
	keys := append([]KV(nil), st.Keys...)
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].Key < keys[j].Key })
	any := false
	for _, kv := range keys {
		switch {
		case strings.HasPrefix(kv.Key, "EXTRACT-"):
			any = true
			x, err := parseExtract(kv.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at(kv), err))
				continue
			}
			r.Extracts = append(r.Extracts, x)
		case kv.Key == "KV_MODE":
			any = true
			switch v := strings.ToLower(kv.Value); v {
			case "auto", "auto_escaped", "":
				r.KVMode = "auto"
			case "none", "json":
				r.KVMode = v
			default:
				errs = append(errs, fmt.Errorf("%s: %q: want auto, none or json", at(kv), kv.Value))
			}
		case strings.HasPrefix(kv.Key, "FIELDALIAS-"):
			any = true
			as, err := parseAliases(kv.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at(kv), err))
				continue
			}
			r.Aliases = append(r.Aliases, as...)
		case strings.HasPrefix(kv.Key, "EVAL-"):
			any = true
			field := strings.TrimPrefix(kv.Key, "EVAL-")
			if field == "" || strings.TrimSpace(kv.Value) == "" {
				errs = append(errs, fmt.Errorf("%s: want EVAL-<field> = <expression>", at(kv)))
				continue
			}
			r.Evals = append(r.Evals, EvalDef{Field: field, Expr: kv.Value, Where: fmt.Sprintf("%s:%d", PropsConf, kv.Line)})
		case strings.HasPrefix(kv.Key, "LOOKUP-"):
			any = true
			l, err := ParseLookupSpec(kv.Value)
			if err == nil {
				_, ok := b.lookups[l.Table]
				if !ok {
					err = fmt.Errorf("no lookup %q in transforms.conf", l.Table)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at(kv), err))
				continue
			}
			r.Lookups = append(r.Lookups, l)
		}
	}
	// REPORT- after every EXTRACT- (Splunk's order), in class order.
	for _, kv := range keys {
		if !strings.HasPrefix(kv.Key, "REPORT-") {
			continue
		}
		any = true
		for _, name := range strings.Split(kv.Value, ",") {
			name = strings.TrimSpace(name)
			t, ok := transforms[name]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: no transform [%s] in transforms.conf", at(kv), name))
				continue
			}
			x, err := parseTransform(t)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			r.Extracts = append(r.Extracts, x)
		}
	}
	if !any {
		return nil, errs
	}
	return r, errs
}

var groupRef = regexp.MustCompile(`\$(\d+)|\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// parseExtract reads `regex [in field]`.
func parseExtract(v string) (Extract, error) {
	re, in := v, ""
	if i := strings.LastIndex(v, " in "); i >= 0 && !strings.ContainsAny(v[i+4:], " ()[]\\") {
		re, in = strings.TrimSpace(v[:i]), strings.TrimSpace(v[i+4:])
	}
	x, err := compileRegex(re)
	if err != nil {
		return Extract{}, err
	}
	named := false
	for _, n := range x.SubexpNames() {
		named = named || n != ""
	}
	if !named {
		return Extract{}, fmt.Errorf("regex %q names no field: use (?<field>…) or (?P<field>…)", re)
	}
	return Extract{Re: x, In: in}, nil
}

// parseTransform reads a REPORT- transform: REGEX, optional FORMAT and
// SOURCE_KEY (field or _raw).
func parseTransform(t *Stanza) (Extract, error) {
	src, _ := t.Get("REGEX")
	if src == "" {
		return Extract{}, fmt.Errorf("%s:%d: [%s]: REGEX is required for a REPORT- transform", TransformsConf, t.Line, t.Name)
	}
	re, err := compileRegex(src)
	if err != nil {
		return Extract{}, fmt.Errorf("%s:%d: [%s] REGEX: %w", TransformsConf, t.Line, t.Name, err)
	}
	x := Extract{Re: re}
	if k, ok := t.Get("SOURCE_KEY"); ok && k != "_raw" {
		x.In = strings.TrimPrefix(k, "field:")
	}
	if f, ok := t.Get("FORMAT"); ok && strings.TrimSpace(f) != "" {
		for _, pair := range strings.Fields(f) {
			name, val, ok := strings.Cut(pair, "::")
			if !ok || name == "" {
				return Extract{}, fmt.Errorf("%s:%d: [%s] FORMAT: %q: want name::value pairs", TransformsConf, t.Line, t.Name, pair)
			}
			x.Format = append(x.Format, [2]string{name, val})
		}
		return x, nil
	}
	named := false
	for _, n := range re.SubexpNames() {
		named = named || n != ""
	}
	if !named {
		return Extract{}, fmt.Errorf("%s:%d: [%s]: REGEX names no field and there is no FORMAT", TransformsConf, t.Line, t.Name)
	}
	return x, nil
}

// Apply runs an extraction on src, calling add for each field it finds.
func (x *Extract) Apply(src string, add func(k, v string)) {
	m := x.Re.FindStringSubmatchIndex(src)
	if m == nil {
		return
	}
	if x.Format == nil {
		for i, n := range x.Re.SubexpNames() {
			if n != "" && m[2*i] >= 0 {
				add(n, src[m[2*i]:m[2*i+1]])
			}
		}
		return
	}
	expand := func(t string) string {
		return groupRef.ReplaceAllStringFunc(t, func(ref string) string {
			var out []byte
			return string(x.Re.ExpandString(out, ref, src, m))
		})
	}
	for _, f := range x.Format {
		if k := expand(f[0]); k != "" {
			add(k, expand(f[1]))
		}
	}
}

// parseAliases reads `a AS b [c AS d …]`.
func parseAliases(v string) ([]Alias, error) {
	w := strings.Fields(v)
	if len(w) == 0 || len(w)%3 != 0 {
		return nil, fmt.Errorf("%q: want <field> AS <alias> […]", v)
	}
	var out []Alias
	for i := 0; i < len(w); i += 3 {
		if !strings.EqualFold(w[i+1], "as") {
			return nil, fmt.Errorf("%q: want <field> AS <alias> […]", v)
		}
		out = append(out, Alias{From: w[i], To: w[i+2]})
	}
	return out, nil
}

// ParseLookupSpec reads `<table> <column> [AS <field>] … [OUTPUT|OUTPUTNEW
// <column> [AS <field>] …]` (LOOKUP- and the lookup command).
func ParseLookupSpec(v string) (AutoLookup, error) {
	w := strings.Fields(v)
	if len(w) < 2 {
		return AutoLookup{}, fmt.Errorf("%q: want <lookup> <field> [AS <field>] [OUTPUT <field> …]", v)
	}
	l := AutoLookup{Table: w[0]}
	out := false
	for i := 1; i < len(w); i++ {
		switch up := strings.ToUpper(w[i]); {
		case up == "OUTPUT" || up == "OUTPUTNEW":
			if out {
				return AutoLookup{}, fmt.Errorf("%q: OUTPUT given twice", v)
			}
			out, l.OutputNew = true, up == "OUTPUTNEW"
			continue
		}
		m := FieldMap{Column: strings.Trim(w[i], ","), Field: strings.Trim(w[i], ",")}
		if i+2 < len(w) && strings.EqualFold(w[i+1], "as") {
			m.Field = strings.Trim(w[i+2], ",")
			i += 2
		}
		if out {
			l.Out = append(l.Out, m)
		} else {
			l.In = append(l.In, m)
		}
	}
	if len(l.In) == 0 {
		return AutoLookup{}, fmt.Errorf("%q: no input field", v)
	}
	return l, nil
}

// eachStanza parses a .conf file and calls fn for every stanza but
// [default], collecting the errors.
func eachStanza(name string, data []byte, fn func(st Stanza) error) []error {
	sts, err := ParseConf(name, data)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, st := range sts {
		if st.Name == "default" {
			continue
		}
		if err := fn(st); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// parseEventtypes reads eventtypes.conf: [name] search = ….
func (b *SearchBundle) parseEventtypes(data []byte) []error {
	return eachStanza(EventtypesConf, data, func(st Stanza) error {
		s, ok := st.Get("search")
		if !ok || strings.TrimSpace(s) == "" {
			return fmt.Errorf("%s:%d: [%s]: search = … is required", EventtypesConf, st.Line, st.Name)
		}
		b.eventtypes[st.Name] = s
		return nil
	})
}

// parseTags reads tags.conf: [field=value] stanzas of tag = enabled.
func (b *SearchBundle) parseTags(data []byte) []error {
	return eachStanza(TagsConf, data, func(st Stanza) error {
		field, value, ok := strings.Cut(st.Name, "=")
		if !ok || field == "" || value == "" {
			return fmt.Errorf("%s:%d: [%s]: want [<field>=<value>]", TagsConf, st.Line, st.Name)
		}
		var errs []error
		for _, kv := range st.Keys {
			switch strings.ToLower(kv.Value) {
			case "enabled":
				b.tags[kv.Key] = append(b.tags[kv.Key], TagTarget{Field: field, Value: value})
			case "disabled":
			default:
				errs = append(errs, fmt.Errorf("%s:%d: %s = %q: want enabled or disabled", TagsConf, kv.Line, kv.Key, kv.Value))
			}
		}
		return errors.Join(errs...)
	})
}
