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
type PreferenceError struct{ Msg string }

func (e *PreferenceError) Error() string { return e.Msg }

func badPreference(format string, a ...any) error {
	return &PreferenceError{Msg: fmt.Sprintf(format, a...)}
}

// ParsePreference parses a preference value. An unknown `_…` value is
// `no preference for [_xyz]`, as Elasticsearch answers.
func ParsePreference(s string) (*Preference, error) {
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
			return nil, badPreference("no preference for [%s]", s)
		}
		p.Kind = name
	case PrefPreferNodes:
		p.Kind, p.Nodes = name, list()
		if len(p.Nodes) == 0 {
			return nil, badPreference("preference [%s]: _prefer_nodes needs at least one node id", s)
		}
	case PrefOnlyNodes:
		p.Kind, p.Specs = name, list()
		if len(p.Specs) == 0 {
			return nil, badPreference("preference [%s]: _only_nodes needs at least one node spec", s)
		}
	case "_buckets":
		ids, rest, _ := strings.Cut(arg, "|")
		arg = ids
		p.Buckets = list()
		if len(p.Buckets) == 0 {
			return nil, badPreference("preference [%s]: _buckets needs at least one bucket id", s)
		}
		r, err := ParsePreference(rest)
		if err != nil {
			return nil, err
		}
		if len(r.Buckets) > 0 {
			return nil, badPreference("preference [%s]: _buckets cannot be nested", s)
		}
		p.Kind = r.Kind
		p.Nodes, p.Specs, p.Rest = r.Nodes, r.Specs, r
		p.Raw = s
	default:
		return nil, badPreference("no preference for [%s]", s)
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
