package knowledge

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// IndexRules are the index-time rules of a configuration bundle: the
// props.conf stanzas that set index-time keys, over the built-in sourcetypes.
// Safe for concurrent use.
type IndexRules struct {
	hash        string
	def         *settings            // [default], nil when it sets no index-time key
	sourcetypes map[string]*settings // user [SOURCETYPE] stanzas
	hosts       []pattern            // [host::P], lowest precedence first
	sources     []pattern            // [source::P], lowest precedence first

	// Without host and source stanzas a rule depends on the sourcetype
	// only: bySourcetype holds every named one, other for the rest.
	bySourcetype map[string]*Rule
	other        *Rule
	builtins     map[string]*settings

	mu    sync.RWMutex
	cache map[ruleKey]*Rule // bounded by maxCachedRules
}

type ruleKey struct{ sourcetype, source, host string }

// maxCachedRules bounds For's cache; when full it starts over.
const maxCachedRules = 4096

// pattern is a [source::P] or [host::P] stanza.
type pattern struct {
	name     string // the stanza name, for ordering
	literal  string // P when it has no wildcard
	re       *regexp.Regexp
	priority int
	s        *settings
}

func (p *pattern) match(v string) bool {
	if p.re == nil {
		return v == p.literal
	}
	return p.re.MatchString(v)
}

// builtinProps are the sourcetypes quarry knows without a bundle. A user
// stanza of the same name is layered over its built-in key by key.
const builtinProps = `
[access_combined]
SHOULD_LINEMERGE = false
TIME_PREFIX = \[
TIME_FORMAT = %d/%b/%Y:%H:%M:%S %z

[syslog]
SHOULD_LINEMERGE = false
TIME_PREFIX = ^
TIME_FORMAT = %b %d %H:%M:%S
MAX_TIMESTAMP_LOOKAHEAD = 32

[_json]
SHOULD_LINEMERGE = false

[json]
SHOULD_LINEMERGE = false
`

var builtins, builtinRules = mustBuiltins()

func mustBuiltins() (map[string]*settings, *IndexRules) {
	stanzas, err := ParseConf("builtin props.conf", []byte(builtinProps))
	if err != nil {
		panic(err)
	}
	b := map[string]*settings{}
	for i := range stanzas {
		s, errs := parseSettings("builtin props.conf", &stanzas[i])
		if len(errs) > 0 {
			panic(errors.Join(errs...))
		}
		s.jsonTime = stanzas[i].Name == "_json" || stanzas[i].Name == "json"
		b[stanzas[i].Name] = &s
	}
	r := &IndexRules{sourcetypes: map[string]*settings{}}
	r.precompute(b)
	return b, r
}

// ParseIndexRules parses and validates the index-time settings of the
// files (see the package comment for the keys). Every error in props.conf
// is reported, each as "FILE:LINE: KEY: what". Empty or nil files give the
// built-ins only.
func ParseIndexRules(f Files) (*IndexRules, error) {
	if len(f) == 0 {
		return builtinRules, nil
	}
	if n := f.size(); n > MaxBundleBytes {
		return nil, fmt.Errorf("%d bytes: %w", n, ErrBundleTooLarge)
	}
	if b, ok := f[TransformsConf]; ok {
		if _, err := ParseConf(TransformsConf, b); err != nil {
			return nil, err
		}
	}
	stanzas, err := ParseConf(PropsConf, f[PropsConf])
	if err != nil {
		return nil, err
	}
	r := &IndexRules{hash: f.Hash(), sourcetypes: map[string]*settings{}}
	var errs []error
	for i := range stanzas {
		errs = append(errs, r.add(&stanzas[i])...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	byPrecedence := func(ps []pattern) {
		sort.SliceStable(ps, func(i, j int) bool {
			if ps[i].priority != ps[j].priority {
				return ps[i].priority < ps[j].priority
			}
			return ps[i].name > ps[j].name // the ASCII-first name is applied last and wins
		})
	}
	byPrecedence(r.hosts)
	byPrecedence(r.sources)
	r.precompute(builtins)
	return r, nil
}

// add files one stanza under its kind; a stanza without index-time keys is
// search-time knowledge and is left out.
func (r *IndexRules) add(st *Stanza) []error {
	s, errs := parseSettings(PropsConf, st)
	kind, pat, isPattern := strings.Cut(st.Name, "::")
	if !isPattern {
		kind = ""
	}
	switch kind {
	case "source", "host":
		p, err := newPattern(st, pat, &s)
		if err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 || s.set == 0 {
			return errs
		}
		if kind == "source" {
			r.sources = append(r.sources, p)
		} else {
			r.hosts = append(r.hosts, p)
		}
	case "":
		if len(errs) > 0 || s.set == 0 {
			return errs
		}
		if st.Name == "default" {
			r.def = &s
		} else {
			r.sourcetypes[st.Name] = &s
		}
	default:
		// rule::, delayedrule:: (sourcetype recognition) and other kinds
		// are not index-time rules of quarry.
	}
	return errs
}

// newPattern compiles a source:: or host:: pattern: "..." matches anything,
// "*" anything but a path separator (/ or \), "|" and "( )" alternate, a
// leading "(?i)" ignores case, "\\" is one backslash; every other byte is
// literal. The pattern matches the whole value.
func newPattern(st *Stanza, pat string, s *settings) (pattern, error) {
	p := pattern{name: st.Name, s: s}
	if v, ok := st.Get("priority"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			line := st.Line
			for _, kv := range st.Keys {
				if kv.Key == "priority" {
					line = kv.Line
				}
			}
			return p, fmt.Errorf("%s:%d: priority: not an integer: %q", PropsConf, line, v)
		}
		p.priority = n
	}
	if !strings.ContainsAny(pat, `*|()\`) && !strings.Contains(pat, "...") {
		p.literal = pat
		if _, ok := st.Get("priority"); !ok {
			p.priority = 100 // a literal match beats a wildcard one
		}
		return p, nil
	}
	var b strings.Builder
	b.WriteString("^(?:")
	rest := pat
	if strings.HasPrefix(rest, "(?i)") {
		b.Reset()
		b.WriteString("(?i)^(?:")
		rest = rest[4:]
	}
	for len(rest) > 0 {
		switch {
		case strings.HasPrefix(rest, "..."):
			b.WriteString(".*")
			rest = rest[3:]
			continue
		case strings.HasPrefix(rest, `\\`):
			b.WriteString(`\\`)
			rest = rest[2:]
			continue
		case rest[0] == '*':
			b.WriteString(`[^/\\]*`)
		case rest[0] == '|' || rest[0] == '(' || rest[0] == ')':
			b.WriteByte(rest[0])
		default:
			b.WriteString(regexp.QuoteMeta(rest[:1]))
		}
		rest = rest[1:]
	}
	b.WriteString(")$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return p, fmt.Errorf("%s:%d: bad pattern [%s]: %w", PropsConf, st.Line, st.Name, err)
	}
	p.re = re
	return p, nil
}

// precompute resolves the rules that depend on the sourcetype only.
func (r *IndexRules) precompute(builtins map[string]*settings) {
	r.builtins = builtins
	r.bySourcetype = map[string]*Rule{}
	for name := range builtins {
		r.bySourcetype[name] = r.resolve(name, "", "")
	}
	for name := range r.sourcetypes {
		r.bySourcetype[name] = r.resolve(name, "", "")
	}
	r.other = r.resolve("", "", "")
	if len(r.hosts)+len(r.sources) > 0 {
		r.cache = map[ruleKey]*Rule{}
	}
}

// Hash is the hash of the Files the rules came from ("" when they were
// empty or nil: the built-ins only).
func (r *IndexRules) Hash() string {
	if r == nil {
		return ""
	}
	return r.hash
}

// For resolves the rule for an event's metadata as Splunk resolves
// props.conf: [source::P] over [host::P] over [SOURCETYPE] (a user stanza
// over the built-in of that name) over [default], merged key by key. Among
// matching source (or host) patterns, a higher priority wins, then a literal
// over a wildcard, then the ASCII-first name. nil when nothing applies: the
// caller keeps one event per line and arrival time.
func (r *IndexRules) For(sourcetype, source, host string) *Rule {
	if r == nil {
		r = builtinRules
	}
	if r.cache == nil {
		if rule, ok := r.bySourcetype[sourcetype]; ok {
			return rule
		}
		return r.other
	}
	k := ruleKey{sourcetype, source, host}
	r.mu.RLock()
	rule, ok := r.cache[k]
	r.mu.RUnlock()
	if ok {
		return rule
	}
	rule = r.resolve(sourcetype, source, host)
	r.mu.Lock()
	if len(r.cache) >= maxCachedRules {
		clear(r.cache)
	}
	r.cache[k] = rule
	r.mu.Unlock()
	return rule
}

// resolve layers the matching stanzas: default, built-in sourcetype, user
// sourcetype, hosts, sources (each list in rising precedence).
func (r *IndexRules) resolve(sourcetype, source, host string) *Rule {
	var layers []*settings
	add := func(s *settings) {
		if s != nil {
			layers = append(layers, s)
		}
	}
	add(r.def)
	add(r.builtins[sourcetype])
	add(r.sourcetypes[sourcetype])
	for i := range r.hosts {
		if r.hosts[i].match(host) {
			add(r.hosts[i].s)
		}
	}
	for i := range r.sources {
		if r.sources[i].match(source) {
			add(r.sources[i].s)
		}
	}
	if len(layers) == 0 {
		return nil
	}
	s := defaultSettings()
	for _, l := range layers {
		s.merge(l)
	}
	return newRule(&s)
}
