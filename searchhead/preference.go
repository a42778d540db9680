package searchhead

import (
	"fmt"

	"github.com/quarry-dev/quarry/query"

	"hash/fnv"
	"path"
	"slices"
	"strings"
)

// Preference is query's parsed preference; the search head orders copies by it.
type Preference = query.Preference

// Preference kinds, as query names them.
const (
	PrefDefault      = query.PrefDefault
	PrefLocal        = query.PrefLocal
	PrefOnlyLocal    = query.PrefOnlyLocal
	PrefPreferNodes  = query.PrefPreferNodes
	PrefOnlyNodes    = query.PrefOnlyNodes
	PrefPrimary      = query.PrefPrimary
	PrefPrimaryFirst = query.PrefPrimaryFirst
	PrefReplica      = query.PrefReplica
	PrefReplicaFirst = query.PrefReplicaFirst
	PrefAdaptive     = query.PrefAdaptive
	PrefCustom       = query.PrefCustom
)

// RequestError is a request the search head refuses before any fan-out
// (HTTP 400 unless Status says otherwise).
type RequestError struct {
	Status int
	Code   string
	Msg    string
	// Position is a syntax error's byte offset in the query (the JSON
	// error's "position", as peers answer it).
	Position *int
	// RetryAfter, when set, is the Retry-After header's seconds (429).
	RetryAfter int
	// Err is the error refused, when there is one (a *query.SyntaxError,
	// a *query.PreferenceError): query.CompileLimit reads it.
	Err error
}

func (e *RequestError) Error() string { return e.Msg }
func (e *RequestError) Unwrap() error { return e.Err }

// ParsePreference parses a preference value (query.ParsePreference) and
// makes its error a 400.
func ParsePreference(s string) (*Preference, error) {
	p, err := query.ParsePreference(s)
	if err != nil {
		return nil, &RequestError{Status: 400, Code: "bad_preference", Msg: err.Error(), Err: err}
	}
	return p, nil
}

// peerInfo is what ordering needs of a peer.
type peerInfo struct {
	ID    string
	Site  string
	Host  string
	Attrs map[string]string
}

// orderInput is one bucket's candidates.
type orderInput struct {
	Bucket  string
	Copies  []string // searchable copies on Up peers, sorted by id
	Primary string   // the site0 primary ("" if none)
	// RR is the round-robin offset of this search and bucket.
	RR int
}

// orderer orders copies for one search.
type orderer struct {
	pref  *Preference
	site  string // the head's site; "site0" has no local copies
	peers map[string]peerInfo
	rank  func(copies []string) []string // _adaptive
}

// rotate returns xs rotated left by n (a copy).
func rotate(xs []string, n int) []string {
	if len(xs) == 0 {
		return nil
	}
	n %= len(xs)
	if n < 0 {
		n += len(xs)
	}
	out := make([]string, 0, len(xs))
	out = append(out, xs[n:]...)
	return append(out, xs[:n]...)
}

func hashOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// order returns the ordered copy list for one bucket, or a request error
// (_only_nodes with no matching copy).
func (o *orderer) order(in orderInput) ([]string, error) {
	p := o.pref
	rr := func(xs []string) []string { return rotate(xs, in.RR) }
	split := func(keep func(id string) bool) (yes, no []string) {
		for _, c := range in.Copies {
			if keep(c) {
				yes = append(yes, c)
			} else {
				no = append(no, c)
			}
		}
		return
	}
	local := func(id string) bool { return o.site != "site0" && o.peers[id].Site == o.site }
	switch p.Kind {
	case PrefDefault:
		// Explicit lists without a preference (fresh, _buckets alone):
		// local copies first, round-robin within each group.
		yes, no := split(local)
		return append(rr(yes), rr(no)...), nil
	case PrefLocal:
		yes, no := split(local)
		return append(rr(yes), rr(no)...), nil
	case PrefOnlyLocal:
		yes, _ := split(local)
		return rr(yes), nil
	case PrefPreferNodes:
		var first []string
		for _, n := range p.Nodes {
			if slices.Contains(in.Copies, n) && !slices.Contains(first, n) {
				first = append(first, n)
			}
		}
		_, rest := split(func(id string) bool { return slices.Contains(first, id) })
		return append(first, rr(rest)...), nil
	case PrefOnlyNodes:
		yes, _ := split(func(id string) bool { return o.matchesAny(id) })
		if len(yes) == 0 {
			return nil, &RequestError{Status: 400, Code: "no_matching_peers",
				Msg: fmt.Sprintf("no peers with criteria [%s] found for bucket [%s]", strings.Join(p.Specs, ","), in.Bucket)}
		}
		return rr(yes), nil
	case PrefPrimary:
		if in.Primary != "" && slices.Contains(in.Copies, in.Primary) {
			return []string{in.Primary}, nil
		}
		return nil, nil
	case PrefPrimaryFirst:
		yes, no := split(func(id string) bool { return id == in.Primary })
		return append(yes, rr(no)...), nil
	case PrefReplica:
		_, no := split(func(id string) bool { return id == in.Primary })
		return rr(no), nil
	case PrefReplicaFirst:
		yes, no := split(func(id string) bool { return id == in.Primary })
		return append(rr(no), yes...), nil
	case PrefAdaptive:
		return o.rank(in.Copies), nil
	case PrefCustom:
		return rotate(in.Copies, int(hashOf(p.CustomKey(), in.Bucket)%uint64(max(1, len(in.Copies))))), nil
	}
	return nil, &RequestError{Status: 400, Code: "bad_preference", Msg: fmt.Sprintf("no preference for [%s]", query.PreferencePreview(p.Raw))}
}

// matchesAny reports whether a peer matches any _only_nodes spec: an exact
// id, a wildcard on the id or the host, or an attribute `key:value` with
// wildcards on both sides (site and host are attributes too).
func (o *orderer) matchesAny(id string) bool {
	pi := o.peers[id]
	for _, spec := range o.pref.Specs {
		if matchSpec(spec, pi) {
			return true
		}
	}
	return false
}

func matchSpec(spec string, pi peerInfo) bool {
	if k, v, ok := strings.Cut(spec, ":"); ok {
		attrs := map[string]string{"site": pi.Site, "host": pi.Host}
		for ak, av := range pi.Attrs {
			attrs[ak] = av
		}
		for ak, av := range attrs {
			if globMatch(k, ak) && globMatch(v, av) {
				return true
			}
		}
		return false
	}
	return globMatch(spec, pi.ID) || (pi.Host != "" && globMatch(spec, pi.Host))
}

// globMatch matches s against a pattern where * is any run of characters
// (and ? one character); other characters are literal.
func globMatch(pattern, s string) bool {
	if !strings.ContainsAny(pattern, "*?[") {
		return pattern == s
	}
	// path.Match treats '/' specially and '[' as a class; escape '[' and
	// match segment-free strings only.
	pat := strings.ReplaceAll(strings.ReplaceAll(pattern, `\`, `\\`), "[", `\[`)
	if strings.Contains(s, "/") {
		pat = strings.ReplaceAll(pat, "/", "")
		s = strings.ReplaceAll(s, "/", "")
	}
	ok, err := path.Match(pat, s)
	return err == nil && ok
}
