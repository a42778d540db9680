package fsm

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultSite is the one site of a single-site cluster (no sites configured):
// every peer belongs to it whatever site it declares.
const DefaultSite = "default"

// Site0 names the primary table that spans every site (searches without site
// affinity). It is never a peer's site.
const Site0 = "site0"

// Config is the cluster configuration held in the FSM (SPEC §3). It is set at
// bootstrap and changed through SetConfig; a config that cannot be met is
// refused and changes nothing.
type Config struct {
	// ReplicationFactor and SearchFactor apply to a single-site cluster
	// (Sites empty).
	ReplicationFactor int `json:"replication_factor"`
	SearchFactor      int `json:"search_factor"`
	// Sites lists the sites of a multisite cluster ("site1".."site63"). Empty
	// means single-site: every peer is in DefaultSite.
	Sites []string `json:"sites,omitempty"`
	// SiteReplicationFactor and SiteSearchFactor are the multisite policies,
	// in Splunk's syntax ("origin:2,total:3"); used only when Sites is set.
	SiteReplicationFactor Policy `json:"site_replication_factor"`
	SiteSearchFactor      Policy `json:"site_search_factor"`

	HeartbeatPeriod  time.Duration `json:"heartbeat_period"`
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout"`
	// RestartTimeout is how long a peer taken offline without enforce-counts
	// may stay away (state Restarting) before fixup beyond primaries starts.
	RestartTimeout time.Duration `json:"restart_timeout"`

	// TargetTimeout (SPEC §4 target_timeout), pushed to peers: a replication
	// target that has not acked a block for this long leaves the set. 0:
	// the managers' --target-timeout (default 2 s).
	TargetTimeout time.Duration `json:"target_timeout,omitempty"`

	// Roll limits, pushed to peers.
	MaxHotBytes   int64         `json:"max_hot_bytes"`
	MaxHotSpan    time.Duration `json:"max_hot_span"`
	MaxHotBuckets int           `json:"max_hot_buckets"`

	// Fixup throttles per peer: open make-searchable tasks on a peer, and
	// open incoming replications to a peer.
	MaxMakeSearchablePerPeer       int `json:"max_make_searchable_per_peer"`
	MaxIncomingReplicationsPerPeer int `json:"max_incoming_replications_per_peer"`

	// Indexes declared by the operator; "main" always exists.
	Indexes []IndexConfig `json:"indexes"`
	// AutoCreateIndexes lets a bucket of an undeclared index create it.
	AutoCreateIndexes bool `json:"auto_create_indexes"`
	// HECTokens are pushed to every peer, as Splunk pushes its bundle.
	HECTokens []HECToken `json:"hec_tokens"`
	// SearchTokens scope searches to indexes (search heads, peers' API).
	SearchTokens []SearchToken `json:"search_tokens,omitempty"`
}

// IndexConfig declares one index and its retention. Zero means unlimited.
// MaxDataSize (bytes, Splunk's maxDataSize) is the size at which a hot
// bucket of the index rolls, pushed to peers; 0 leaves the peers' own
// limit, and a smaller size than theirs wins (peer/store/datasize.go).
type IndexConfig struct {
	Name             string        `json:"name"`
	FrozenTimePeriod time.Duration `json:"frozen_time_period,omitempty"`
	MaxTotalBytes    int64         `json:"max_total_bytes,omitempty"`
	MaxDataSize      int64         `json:"max_data_size,omitempty"`
}

// MinMaxDataSize is the smallest max_data_size accepted: below it nearly
// every event would roll a bucket of its own.
const MinMaxDataSize = 4 << 10

// HECToken is one HEC token: the indexes it may write, its default index,
// whether its requests are acknowledged with ack ids (Splunk's useACK;
// true when the JSON leaves it out, see UnmarshalJSON), and whether
// `?token=` may carry it (Splunk's allowQueryStringAuth, default false).
type HECToken struct {
	Token                string   `json:"token"`
	Indexes              []string `json:"indexes,omitempty"`
	DefaultIndex         string   `json:"default_index,omitempty"`
	Ack                  bool     `json:"use_ack"`
	AllowQueryStringAuth bool     `json:"allow_query_string_auth,omitempty"`
	Disabled             bool     `json:"disabled,omitempty"`
	// Host, Source and Sourcetype are the token's defaults for events that
	// name none (Splunk's inputs.conf host/source/sourcetype of an HEC
	// token): a request's query parameters and an event's own values come
	// first. Set only by a group at cluster version TokenDefaultsVersion.
	Host       string `json:"host,omitempty"`
	Source     string `json:"source,omitempty"`
	Sourcetype string `json:"sourcetype,omitempty"`
}

// TokenDefaultsVersion is the cluster version from which a HEC token may
// carry host/source/sourcetype defaults (an older manager refuses the
// field names when it decodes the config).
const TokenDefaultsVersion = 5

// hasTokenDefaults reports whether any HEC token carries defaults.
func (c *Config) hasTokenDefaults() bool {
	for _, t := range c.HECTokens {
		if t.Host != "" || t.Source != "" || t.Sourcetype != "" {
			return true
		}
	}
	return false
}

// hasPublishScopes reports whether any search token carries Publish.
func (c *Config) hasPublishScopes() bool {
	for _, t := range c.SearchTokens {
		if t.Publish != nil {
			return true
		}
	}
	return false
}

// bodyVersion: a config whose tokens carry defaults needs a group at
// TokenDefaultsVersion, one whose search tokens carry publish names at
// PublishScopeVersion (the body layout itself is unchanged).
func (c *SetConfig) bodyVersion() (byte, int) {
	if c.Config.hasPublishScopes() {
		return bodyVersion, PublishScopeVersion
	}
	if c.Config.hasTokenDefaults() {
		return bodyVersion, TokenDefaultsVersion
	}
	return bodyVersion, 1
}

// DefaultConfig is the library default config: single site, RF 3, SF 2,
// heartbeats every second with a 10 s timeout, the multisite policies that
// apply once sites are set (origin:2,total:3 and origin:1,total:2), and
// Splunk's fixup throttles (2 make-searchable, 5 incoming replications).
//
// The roll limits are the peer's own defaults (quarry peer --max-hot-bytes
// 32 MiB, --max-hot-span 90 days), which a cluster peer replaces with the
// config's: a hot bucket's index is held in memory, bounded by
// max_hot_bytes, so the cluster default stays what a peer is sized for.
func DefaultConfig() Config {
	return Config{
		ReplicationFactor:              3,
		SearchFactor:                   2,
		SiteReplicationFactor:          Policy{Origin: 2, Total: 3},
		SiteSearchFactor:               Policy{Origin: 1, Total: 2},
		HeartbeatPeriod:                time.Second,
		HeartbeatTimeout:               10 * time.Second,
		RestartTimeout:                 60 * time.Second,
		MaxHotBytes:                    32 << 20,
		MaxHotSpan:                     90 * 24 * time.Hour,
		MaxHotBuckets:                  3,
		MaxMakeSearchablePerPeer:       2,
		MaxIncomingReplicationsPerPeer: 5,
		Indexes:                        []IndexConfig{{Name: "main"}},
	}
}

// Multisite reports whether sites are configured.
func (c Config) Multisite() bool { return len(c.Sites) > 0 }

// SiteNames returns the sites peers can belong to: the configured sites, or
// just DefaultSite in a single-site cluster. Sorted.
func (c Config) SiteNames() []string {
	if !c.Multisite() {
		return []string{DefaultSite}
	}
	out := slices.Clone(c.Sites)
	sort.Strings(out)
	return out
}

// rfPolicy is the effective replication policy: the site policy, or
// origin:RF,total:RF in a single-site cluster.
func (c Config) rfPolicy() Policy {
	if !c.Multisite() {
		return Policy{Origin: c.ReplicationFactor, Total: c.ReplicationFactor}
	}
	return c.SiteReplicationFactor
}

// sfPolicy is the effective search policy.
func (c Config) sfPolicy() Policy {
	if !c.Multisite() {
		return Policy{Origin: c.SearchFactor, Total: c.SearchFactor}
	}
	return c.SiteSearchFactor
}

// ErrBadConfig is wrapped by every refusal of a config; the wrapped message
// says what is wrong and with which input.
var ErrBadConfig = errors.New("bad config")

// ErrBadSite is returned for a site name that is not a configured site, or
// for site0 given as a peer's site.
var ErrBadSite = errors.New("bad site")

func badConfig(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
}

// Validate checks the config can be met: SF ≤ RF, sites well named (site0
// is not a site), policies naming only configured sites, total at least the
// explicit sum for every possible origin site, SF sites a subset of RF's with
// counts no larger, positive timeouts and throttles, index and token names.
func (c Config) Validate() error {
	if !c.Multisite() {
		if c.ReplicationFactor < 1 {
			return badConfig("replication_factor %d: must be at least 1", c.ReplicationFactor)
		}
		if c.SearchFactor < 1 {
			return badConfig("search_factor %d: must be at least 1", c.SearchFactor)
		}
		if c.SearchFactor > c.ReplicationFactor {
			return badConfig("search_factor %d is larger than replication_factor %d", c.SearchFactor, c.ReplicationFactor)
		}
	} else {
		seen := map[string]bool{}
		for _, s := range c.Sites {
			if s == Site0 {
				return badConfig("sites %v: site0 is the all-sites search affinity, not a site", c.Sites)
			}
			if err := checkSiteName(s); err != nil {
				return badConfig("sites %v: %v", c.Sites, err)
			}
			if seen[s] {
				return badConfig("sites %v: %q listed twice", c.Sites, s)
			}
			seen[s] = true
		}
		rf, sf := c.SiteReplicationFactor, c.SiteSearchFactor
		if err := rf.check(c.Sites); err != nil {
			return badConfig("site_replication_factor %q: %v", rf.String(), err)
		}
		if err := sf.check(c.Sites); err != nil {
			return badConfig("site_search_factor %q: %v", sf.String(), err)
		}
		if sf.Origin > rf.Origin {
			return badConfig("site_search_factor %q: origin:%d is larger than site_replication_factor %q origin:%d", sf.String(), sf.Origin, rf.String(), rf.Origin)
		}
		if sf.Total > rf.Total {
			return badConfig("site_search_factor %q: total:%d is larger than site_replication_factor %q total:%d", sf.String(), sf.Total, rf.String(), rf.Total)
		}
		for _, s := range sortedKeys(sf.Sites) {
			n, ok := rf.Sites[s]
			if !ok {
				return badConfig("site_search_factor %q names %s, which site_replication_factor %q lacks", sf.String(), s, rf.String())
			}
			if sf.Sites[s] > n {
				return badConfig("site_search_factor %q: %s:%d is larger than site_replication_factor %q %s:%d", sf.String(), s, sf.Sites[s], rf.String(), s, n)
			}
		}
	}
	if c.HeartbeatPeriod <= 0 {
		return badConfig("heartbeat_period %s: must be positive", c.HeartbeatPeriod)
	}
	if c.HeartbeatTimeout <= c.HeartbeatPeriod {
		return badConfig("heartbeat_timeout %s: must be longer than heartbeat_period %s", c.HeartbeatTimeout, c.HeartbeatPeriod)
	}
	if c.RestartTimeout < 0 {
		return badConfig("restart_timeout %s: must not be negative", c.RestartTimeout)
	}
	if c.TargetTimeout < 0 {
		return badConfig("target_timeout %s: must not be negative", c.TargetTimeout)
	}
	if c.MaxHotBytes < 0 || c.MaxHotSpan < 0 || c.MaxHotBuckets < 0 {
		return badConfig("roll limits max_hot_bytes=%d max_hot_span=%s max_hot_buckets=%d: must not be negative", c.MaxHotBytes, c.MaxHotSpan, c.MaxHotBuckets)
	}
	if c.MaxMakeSearchablePerPeer < 1 {
		return badConfig("max_make_searchable_per_peer %d: must be at least 1", c.MaxMakeSearchablePerPeer)
	}
	if c.MaxIncomingReplicationsPerPeer < 1 {
		return badConfig("max_incoming_replications_per_peer %d: must be at least 1", c.MaxIncomingReplicationsPerPeer)
	}
	idx := map[string]bool{"main": true}
	for _, ic := range c.Indexes {
		if err := checkIndexName(ic.Name); err != nil {
			return badConfig("index %q: %v", ic.Name, err)
		}
		if ic.FrozenTimePeriod < 0 || ic.MaxTotalBytes < 0 {
			return badConfig("index %q: retention must not be negative", ic.Name)
		}
		if ic.MaxDataSize != 0 && ic.MaxDataSize < MinMaxDataSize {
			return badConfig("index %q: max_data_size %d: must be 0 (the peers' limit) or at least %d bytes", ic.Name, ic.MaxDataSize, MinMaxDataSize)
		}
		idx[ic.Name] = true
	}
	return c.checkTokens(idx)
}

// checkTokens validates the HEC tokens (non-empty, listed once, scoped to
// declared indexes unless indexes are created on demand, a default index
// among their own) and the search tokens' publish patterns; idx holds the
// declared indexes.
func (c Config) checkTokens(idx map[string]bool) error {
	toks := map[string]bool{}
	for _, t := range c.HECTokens {
		if t.Token == "" {
			return badConfig("hec token: empty token")
		}
		if toks[t.Token] {
			return badConfig("hec token %s: listed twice", redact(t.Token))
		}
		toks[t.Token] = true
		if !c.AutoCreateIndexes {
			for _, i := range t.Indexes {
				if !idx[i] {
					return badConfig("hec token %s: unknown index %q", redact(t.Token), i)
				}
			}
			if t.DefaultIndex != "" && !idx[t.DefaultIndex] {
				return badConfig("hec token %s: unknown default index %q", redact(t.Token), t.DefaultIndex)
			}
		}
		if t.DefaultIndex != "" && len(t.Indexes) > 0 && !slices.Contains(t.Indexes, t.DefaultIndex) {
			return badConfig("hec token %s: default index %q is not among its indexes %v", redact(t.Token), t.DefaultIndex, t.Indexes)
		}
	}
	for _, t := range c.SearchTokens {
		if len(t.Publish) > MaxPublishPatterns {
			return badConfig("search token %s: %d publish patterns, at most %d", redact(t.Token), len(t.Publish), MaxPublishPatterns)
		}
		for _, p := range t.Publish {
			if err := validPublishPattern(p); err != nil {
				return badConfig("search token %s: %v", redact(t.Token), err)
			}
		}
	}
	return nil
}

// redact keeps a token out of error messages but leaves enough to find it.
func redact(tok string) string {
	if len(tok) <= 4 {
		return "****"
	}
	return tok[:4] + "…"
}

// checkSiteName accepts Splunk's site names, site1 … site63.
func checkSiteName(s string) error {
	n, ok := strings.CutPrefix(s, "site")
	if !ok {
		return fmt.Errorf("site %q: must be site1 … site63", s)
	}
	v, err := strconv.Atoi(n)
	if err != nil || v < 1 || v > 63 || strconv.Itoa(v) != n {
		return fmt.Errorf("site %q: must be site1 … site63", s)
	}
	return nil
}

// checkIndexName accepts names a bucket id can carry: letters, digits, '_'
// and '-', not starting with '_' or '-'.
func checkIndexName(s string) error {
	if s == "" || len(s) > 80 {
		return errors.New("index name must be 1 to 80 characters")
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (i > 0 && (r == '_' || r == '-'))
		if !ok {
			return fmt.Errorf("index name %q: only a-z, 0-9, '_' and '-' (not first)", s)
		}
	}
	return nil
}

// Policy is a multisite replication or search policy in Splunk's syntax:
// "origin:2,site1:1,total:3". Origin and Total are mandatory; Sites holds the
// explicit per-site entries.
type Policy struct {
	Origin int            `json:"-"`
	Total  int            `json:"-"`
	Sites  map[string]int `json:"-"`
}

// ParsePolicy parses Splunk's policy syntax: a comma list of <site>:<n> with
// mandatory origin and total. It checks syntax only; Config.Validate checks
// the policy against the sites and the other policy.
func ParsePolicy(s string) (Policy, error) {
	var p Policy
	var haveOrigin, haveTotal bool
	if strings.TrimSpace(s) == "" {
		return Policy{}, fmt.Errorf("parse policy %q: empty", s)
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		name, val, ok := strings.Cut(part, ":")
		if !ok {
			return Policy{}, fmt.Errorf("parse policy %q: entry %q is not <site>:<n>", s, part)
		}
		name = strings.TrimSpace(name)
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || n < 0 {
			return Policy{}, fmt.Errorf("parse policy %q: entry %q: count must be a non-negative integer", s, part)
		}
		switch name {
		case "origin":
			if haveOrigin {
				return Policy{}, fmt.Errorf("parse policy %q: origin given twice", s)
			}
			haveOrigin, p.Origin = true, n
		case "total":
			if haveTotal {
				return Policy{}, fmt.Errorf("parse policy %q: total given twice", s)
			}
			haveTotal, p.Total = true, n
		case Site0:
			return Policy{}, fmt.Errorf("parse policy %q: site0 is not a site", s)
		default:
			if err := checkSiteName(name); err != nil {
				return Policy{}, fmt.Errorf("parse policy %q: %w", s, err)
			}
			if _, dup := p.Sites[name]; dup {
				return Policy{}, fmt.Errorf("parse policy %q: %s given twice", s, name)
			}
			if p.Sites == nil {
				p.Sites = map[string]int{}
			}
			p.Sites[name] = n
		}
	}
	if !haveOrigin {
		return Policy{}, fmt.Errorf("parse policy %q: origin is mandatory", s)
	}
	if !haveTotal {
		return Policy{}, fmt.Errorf("parse policy %q: total is mandatory", s)
	}
	return p, nil
}

// MustParsePolicy is ParsePolicy for constants; it panics on error.
func MustParsePolicy(s string) Policy {
	p, err := ParsePolicy(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String writes the policy in Splunk's syntax, explicit sites sorted.
func (p Policy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "origin:%d", p.Origin)
	for _, s := range sortedKeys(p.Sites) {
		fmt.Fprintf(&b, ",%s:%d", s, p.Sites[s])
	}
	fmt.Fprintf(&b, ",total:%d", p.Total)
	return b.String()
}

// MarshalText writes the policy as its Splunk string.
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses the Splunk string.
func (p *Policy) UnmarshalText(b []byte) error {
	q, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// check validates the policy against the configured sites: every explicit
// site exists, counts are sane, and total covers the explicit entries for
// every possible origin site (where the origin is also named explicitly the
// larger count applies).
func (p Policy) check(sites []string) error {
	if p.Origin < 1 {
		return fmt.Errorf("origin:%d must be at least 1", p.Origin)
	}
	for _, s := range sortedKeys(p.Sites) {
		if !slices.Contains(sites, s) {
			return fmt.Errorf("unknown site %s (sites are %v)", s, sites)
		}
	}
	for _, o := range sites {
		need := p.need(o)
		sum := 0
		for _, n := range need {
			sum += n
		}
		if sum > p.Total {
			return fmt.Errorf("total:%d is below the explicit sum %d (for a bucket from %s)", p.Total, sum, o)
		}
	}
	return nil
}

// need returns the explicit per-site counts for a bucket whose origin is on
// site origin: the origin site gets max(origin, its explicit entry), explicit
// sites their count. The rest of Total is spread over the other sites.
func (p Policy) need(origin string) map[string]int {
	out := map[string]int{}
	for s, n := range p.Sites {
		if n > 0 {
			out[s] = n
		}
	}
	out[origin] = max(p.Origin, p.Sites[origin])
	return out
}

// Need is the public form of the per-site requirement for a bucket from
// originSite: explicit counts per site and the remainder to spread over the
// other sites.
func (p Policy) Need(originSite string) (perSite map[string]int, rest int) {
	perSite = p.need(originSite)
	sum := 0
	for _, n := range perSite {
		sum += n
	}
	return perSite, max(0, p.Total-sum)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
