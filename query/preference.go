package query

import (
	"fmt"
	"strings"
)

// The `preference` request rules (SPEC §5, Elasticsearch semantics) are
// parsed here, once, for every role that takes a search request: a search
// head routes by them; a peer's single-peer search, which searches its own
// copies whatever the preference, refuses the same invalid values.

// Preference is a parsed `preference` value (SPEC §5, Elasticsearch
// semantics): per bucket, an ordered list of copies; the first serves the
// bucket, the rest are its failover chain.
type Preference struct {
	Raw  string
	Kind string // "" (default plan), _local, _only_local, _prefer_nodes, _only_nodes, _primary, _primary_first, _replica, _replica_first, _adaptive, custom
	// Nodes: _prefer_nodes ids; Specs: _only_nodes specs as written.
	Nodes []string
	Specs []string
	// Buckets: _buckets restricts the search to these buckets; Rest orders them.
	Buckets []string
	Rest    *Preference
}

// Preference kinds.
const (
	PrefDefault      = ""
	PrefLocal        = "_local"
	PrefOnlyLocal    = "_only_local"
	PrefPreferNodes  = "_prefer_nodes"
	PrefOnlyNodes    = "_only_nodes"
	PrefPrimary      = "_primary"
	PrefPrimaryFirst = "_primary_first"
	PrefReplica      = "_replica"
	PrefReplicaFirst = "_replica_first"
	PrefAdaptive     = "_adaptive"
	PrefCustom       = "custom"
)

// PreferenceError is a preference value the request rules refuse (HTTP
// 400 with code bad_preference, before any fan-out).
type PreferenceError struct {
	Msg   string
	Limit string // "preference" when a preference limit refused it
}

func (e *PreferenceError) Error() string { return e.Msg }

func badPreference(format string, a ...any) error {
	return &PreferenceError{Msg: fmt.Sprintf(format, a...)}
}

// preferenceLimit is a preference refused by one of its limits.
func preferenceLimit(format string, a ...any) error {
	return &PreferenceError{Msg: fmt.Sprintf(format, a...), Limit: "preference"}
}

// Preference limits (security review L4): a value's length, the node ids
// or specs of _prefer_nodes/_only_nodes, one id or spec's length, and the
// bucket ids of _buckets. The head matches every spec against every copy
// of every bucket, so the product is what is bounded. An error message
// shows at most previewBytes of the value.
const (
	MaxPreferenceBytes   = 64 << 10
	MaxPreferenceNodes   = 64
	MaxPreferenceItem    = 256
	MaxPreferenceBuckets = 10000
	previewBytes         = 200
)

// PreferencePreview is a preference value as an error message shows it:
// cut to its first 200 bytes.
func PreferencePreview(s string) string { return preview(s) }

// preview is s cut to previewBytes for an error message.
func preview(s string) string {
	if len(s) <= previewBytes {
		return s
	}
	return s[:previewBytes] + fmt.Sprintf("… (%d bytes)", len(s))
}

// ParsePreference parses a preference value. An unknown `_…` value is
// `no preference for [_xyz]`, as Elasticsearch answers.
func ParsePreference(s string) (*Preference, error) {
	if len(s) > MaxPreferenceBytes {
		return nil, preferenceLimit("preference [%s]: longer than %d bytes", preview(s), MaxPreferenceBytes)
	}
	p, err := parsePreference(s)
	if err != nil {
		return nil, err
	}
	for _, l := range []struct {
		what  string
		items []string
		max   int
	}{{"node ids", p.Nodes, MaxPreferenceNodes}, {"node specs", p.Specs, MaxPreferenceNodes}, {"bucket ids", p.Buckets, MaxPreferenceBuckets}} {
		if len(l.items) > l.max {
			return nil, preferenceLimit("preference [%s]: %d %s, more than the %d allowed", preview(s), len(l.items), l.what, l.max)
		}
		for _, it := range l.items {
			if len(it) > MaxPreferenceItem {
				return nil, preferenceLimit("preference [%s]: one of its %s is %d bytes, more than %d", preview(s), l.what, len(it), MaxPreferenceItem)
			}
		}
	}
	return p, nil
}

func parsePreference(s string) (*Preference, error) {
	p := &Preference{Raw: s}
	if s == "" {
		return p, nil
	}
	if !strings.HasPrefix(s, "_") {
		p.Kind = PrefCustom
		return p, nil
	}
	name, arg, hasArg := strings.Cut(s, ":")
	list := func() []string {
		var out []string
		for _, x := range strings.Split(arg, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
		return out
	}
	switch name {
	case PrefLocal, PrefOnlyLocal, PrefPrimary, PrefPrimaryFirst, PrefReplica, PrefReplicaFirst, PrefAdaptive:
		if hasArg {
			return nil, badPreference("no preference for [%s]", preview(s))
		}
		p.Kind = name
	case PrefPreferNodes:
		p.Kind, p.Nodes = name, list()
		if len(p.Nodes) == 0 {
			return nil, badPreference("preference [%s]: _prefer_nodes needs at least one node id", preview(s))
		}
	case PrefOnlyNodes:
		p.Kind, p.Specs = name, list()
		if len(p.Specs) == 0 {
			return nil, badPreference("preference [%s]: _only_nodes needs at least one node spec", preview(s))
		}
	case "_buckets":
		ids, rest, _ := strings.Cut(arg, "|")
		arg = ids
		p.Buckets = list()
		if len(p.Buckets) == 0 {
			return nil, badPreference("preference [%s]: _buckets needs at least one bucket id", preview(s))
		}
		r, err := parsePreference(rest)
		if err != nil {
			return nil, err
		}
		if len(r.Buckets) > 0 {
			return nil, badPreference("preference [%s]: _buckets cannot be nested", preview(s))
		}
		p.Kind = r.Kind
		p.Nodes, p.Specs, p.Rest = r.Nodes, r.Specs, r
		p.Raw = s
	default:
		return nil, badPreference("no preference for [%s]", preview(s))
	}
	return p, nil
}

// Explicit reports whether the search uses explicit bucket lists (every
// preference but the default plan).
func (p *Preference) Explicit() bool { return p.Kind != PrefDefault || len(p.Buckets) > 0 }

// CustomKey is the string a custom preference hashes: the raw value, or
// the part after `|` of _buckets.
func (p *Preference) CustomKey() string {
	if p.Rest != nil {
		return p.Rest.Raw
	}
	return p.Raw
}
