package manager

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// Indexes and tokens as first-class objects of the admin API (issue 13):
//
//	GET    /v1/indexes          every index: declared (with retention) or known from buckets
//	POST   /v1/indexes          add one: {"name", "frozen_time_period", "max_total_bytes", "max_data_size"}
//	DELETE /v1/indexes/{name}   remove a declared index (not main, not one a token names)
//	GET    /v1/tokens           HEC and search tokens by id, never their secrets (?reveal is refused)
//	POST   /v1/tokens           add one: {"kind": "hec"|"search", "token", "indexes", "default_index", "use_ack", "allow_query_string_auth"}
//	DELETE /v1/tokens/{id}      revoke a token by its id (TokenID)
//
// Every one needs the admin token. Each write is one read-modify-write of
// the cluster config, committed as an fsm.SetConfig: a configEditor runs them
// one at a time on the leader, after a Raft barrier, so the config each edit
// starts from holds every committed change and two admins never lose each
// other's change (POST /v1/config takes the same lock). The change then
// reaches peers and search heads as any config change does (DESIGN.md,
// "Indexes and tokens").

// Sentinel errors of the index and token endpoints.
var (
	// ErrIndexExists: an index of that name is already declared.
	ErrIndexExists = errors.New("index exists")
	// ErrIndexInUse: a token names the index (or it is main).
	ErrIndexInUse = errors.New("index in use")
	// ErrTokenExists: the token is already a HEC or search token.
	ErrTokenExists = errors.New("token exists")
	// ErrUnknownToken: no token has that id.
	ErrUnknownToken = errors.New("unknown token")
)

// Token kinds of POST /v1/tokens.
const (
	TokenKindHEC    = "hec"
	TokenKindSearch = "search"
)

// IndexView is one index of GET /v1/indexes. Declared is false for an index
// the cluster still knows but the config no longer declares: removed (its
// buckets, if any, stay until retention) or auto-created by a bucket.
type IndexView struct {
	Name             string `json:"name"`
	Declared         bool   `json:"declared"`
	FrozenTimePeriod string `json:"frozen_time_period,omitempty"`
	MaxTotalBytes    int64  `json:"max_total_bytes,omitempty"`
	MaxDataSize      int64  `json:"max_data_size,omitempty"`
}

// IndexRequest is the body of POST /v1/indexes. FrozenTimePeriod is a
// duration as ParseRetentionPeriod reads it ("90d", "720h", "86400");
// empty or zero means unlimited, as MaxTotalBytes 0 does. MaxDataSize is
// the size at which a hot bucket of the index rolls (0: the peers' own
// limit; else at least fsm.MinMaxDataSize).
type IndexRequest struct {
	Name             string `json:"name"`
	FrozenTimePeriod string `json:"frozen_time_period,omitempty"`
	MaxTotalBytes    int64  `json:"max_total_bytes,omitempty"`
	MaxDataSize      int64  `json:"max_data_size,omitempty"`
}

// TokenView is one token of GET /v1/tokens. Token (the secret) is filled
// only in the answer of POST /v1/tokens, once (no read shows it, SPEC §7);
// Prefix
// shows its first characters so an operator can tell tokens apart.
type TokenView struct {
	ID                   string   `json:"id"`
	Kind                 string   `json:"kind"`
	Prefix               string   `json:"prefix"`
	Token                string   `json:"token,omitempty"`
	Indexes              []string `json:"indexes,omitempty"`
	DefaultIndex         string   `json:"default_index,omitempty"`
	UseAck               *bool    `json:"use_ack,omitempty"`
	AllowQueryStringAuth bool     `json:"allow_query_string_auth,omitempty"`
	Disabled             bool     `json:"disabled,omitempty"`
	// Host, Source, Sourcetype: a HEC token's event defaults.
	Host       string `json:"host,omitempty"`
	Source     string `json:"source,omitempty"`
	Sourcetype string `json:"sourcetype,omitempty"`
	// Publish: a search token's result names (fsm.SearchToken.Publish).
	Publish []string `json:"publish,omitempty"`
}

// TokenRequest is the body of POST /v1/tokens. Token empty: the manager
// generates one (24 random bytes, hex). UseAck (HEC only) defaults to true,
// as in the cluster config.
type TokenRequest struct {
	Kind                 string   `json:"kind"`
	Token                string   `json:"token,omitempty"`
	Indexes              []string `json:"indexes,omitempty"`
	DefaultIndex         string   `json:"default_index,omitempty"`
	UseAck               *bool    `json:"use_ack,omitempty"`
	AllowQueryStringAuth bool     `json:"allow_query_string_auth,omitempty"`
	// Host, Source, Sourcetype (HEC only): defaults for events that name
	// none (fsm.HECToken); taken once the group is at cluster version
	// fsm.TokenDefaultsVersion (409 cluster_version before).
	Host       string `json:"host,omitempty"`
	Source     string `json:"source,omitempty"`
	Sourcetype string `json:"sourcetype,omitempty"`
	// Publish (search only): the result names its searches may publish
	// to (fsm.SearchToken.Publish; absent: any); taken once the group is
	// at cluster version fsm.PublishScopeVersion (409 cluster_version
	// before).
	Publish []string `json:"publish,omitempty"`
}

// TokenID is a token's id in a cluster without a token key: the first 16
// hex digits of its SHA-256. The CLI computes it from a secret it is given
// to revoke (the secret never leaves the CLI), and DELETE /v1/tokens/{id}
// takes it in any cluster.
func TokenID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// KeyedTokenID is a token's public id: the first 16 hex digits of its
// digest under the cluster's token key (fsm.KeyedDigest), TokenID while
// the cluster has none. Lists and revocations name a token by it, so the
// secret never has to appear in a URL, a log line or a listing; keyed, it
// lets no one who reads a listing check guesses of the secret offline
// (review L1). Stable within a cluster: the key never changes once set.
func KeyedTokenID(key []byte, token string) string {
	if len(key) == 0 {
		return TokenID(token)
	}
	sum, _ := fsm.DigestSum(fsm.KeyedDigest(key, token))
	return hex.EncodeToString(sum[:8])
}

// tokenNamed reports whether id names token: its KeyedTokenID, or its
// TokenID (what the CLI computes from a secret, and the id a listing
// showed before the cluster had its key).
func tokenNamed(key []byte, token, id string) bool {
	return KeyedTokenID(key, token) == id || TokenID(token) == id
}

// IsTokenID reports whether s has the form of a TokenID.
func IsTokenID(s string) bool {
	if len(s) != 16 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// tokenPrefix is what a listing shows of a secret: its first 4 characters.
func tokenPrefix(tok string) string {
	if len(tok) <= 8 {
		return "****"
	}
	return tok[:4] + "…"
}

// ParseRetentionPeriod reads a retention period: a Go duration ("720h",
// "90m"), a whole number of days or weeks ("90d", "2w"), or bare seconds
// ("7776000", Splunk's frozenTimePeriodInSecs). "0" or "" means unlimited.
// Negative, fractional day counts and overflowing values are refused.
func ParseRetentionPeriod(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("frozen_time_period %q: %s (want e.g. 90d, 2w, 720h or seconds)", s, why)
	}
	unit := time.Duration(0)
	num := s
	switch {
	case strings.HasSuffix(s, "d"):
		unit, num = 24*time.Hour, strings.TrimSuffix(s, "d")
	case strings.HasSuffix(s, "w"):
		unit, num = 7*24*time.Hour, strings.TrimSuffix(s, "w")
	case strings.Trim(s, "0123456789") == "":
		unit = time.Second
	}
	if unit == 0 {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, bad("not a duration")
		}
		if d < 0 {
			return 0, bad("negative")
		}
		return d, nil
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || strings.Trim(num, "0123456789") != "" {
		return 0, bad("not a whole number")
	}
	if n > int64(math.MaxInt64/unit) {
		return 0, bad("too large")
	}
	return time.Duration(n) * unit, nil
}

// ParseByteSize reads a size: bare bytes ("1048576") or a number with a
// binary unit, case-insensitive: KB/KiB = 1024, MB/MiB, GB/GiB, TB/TiB (as
// Splunk's sizes count in MB of 1024²). "0" means unlimited. Negative,
// fractional and overflowing values are refused.
func ParseByteSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	low := strings.ToLower(s)
	units := []struct {
		suffix string
		mult   int64
	}{
		{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
		{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"tb", 1 << 40},
		{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
	}
	mult, num := int64(1), low
	for _, u := range units {
		if strings.HasSuffix(low, u.suffix) {
			mult, num = u.mult, strings.TrimSpace(strings.TrimSuffix(low, u.suffix))
			break
		}
	}
	if num == "" || strings.Trim(num, "0123456789") != "" {
		return 0, fmt.Errorf("size %q: want a whole number of bytes, optionally with KB, MB, GB or TB (powers of 1024)", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * mult, nil
}

// checkTokenValue accepts a token a flag could also carry: 8 to 256
// characters, none of them space, ',', ';', '=' or ':' (the --hec-token
// syntax's separators).
func checkTokenValue(tok string) error {
	if len(tok) < 8 || len(tok) > 256 {
		return fmt.Errorf("%w: token must be 8 to 256 characters, got %d", errBadRequest, len(tok))
	}
	if strings.ContainsAny(tok, " \t\r\n,;=:") {
		return fmt.Errorf("%w: token %s: no spaces, ',', ';', '=' or ':'", errBadRequest, tokenPrefix(tok))
	}
	return nil
}

// configEditor serves the index and token endpoints. One per manager
// (routes builds it); mu makes each read-modify-write of the config the
// only one in flight on this leader.
type configEditor struct {
	m  *Manager
	h  *httpAPI // the API it serves beside: redirects and applies
	mu sync.Mutex
}

// serialised wraps a handler that writes the whole config (POST
// /v1/config) so it takes turns with the editor's changes.
func (e *configEditor) serialised(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		h(w, r)
	}
}

// edit runs change on a copy of the committed config and commits the
// result. change returns an error (an *APIError, or one toAPIError maps)
// to refuse; nothing is committed then. It writes the error answer itself
// and reports whether the change was committed.
func (e *configEditor) edit(w http.ResponseWriter, r *http.Request, change func(s *fsm.State, cfg *fsm.Config) error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), writeTimeout)
	defer cancel()
	// A new leader may answer before its term's Barrier has applied every
	// committed entry; this one makes the config read below current.
	if err := waitFuture(ctx, e.m.node.raft.Barrier(timeoutOf(ctx))); err != nil {
		if ctx.Err() == nil {
			e.h.redirectToLeader(w, r)
		} else {
			writeError(w, toAPIError(ctx.Err()))
		}
		return false
	}
	var (
		cfg fsm.Config
		err error
	)
	e.m.state.Read(func(s *fsm.State) {
		cfg = s.Config()
		cfg.Indexes = slices.Clone(cfg.Indexes)
		cfg.HECTokens = slices.Clone(cfg.HECTokens)
		cfg.SearchTokens = slices.Clone(cfg.SearchTokens)
		err = change(s, &cfg)
	})
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		writeError(w, toAPIError(err))
		return false
	}
	_, ok := e.h.applyHTTP(w, r, &fsm.SetConfig{ReqID: requestID(r), Config: cfg})
	return ok
}

// ---- indexes ----------------------------------------------------------------

func indexViews(s *fsm.State) []IndexView {
	cfg := s.Config()
	seen := map[string]bool{}
	var out []IndexView
	for _, ic := range cfg.Indexes {
		v := IndexView{Name: ic.Name, Declared: true, MaxTotalBytes: ic.MaxTotalBytes, MaxDataSize: ic.MaxDataSize}
		if ic.FrozenTimePeriod > 0 {
			v.FrozenTimePeriod = ic.FrozenTimePeriod.String()
		}
		out, seen[ic.Name] = append(out, v), true
	}
	if !seen["main"] { // main always exists (fsm.Config.Validate)
		out, seen["main"] = append(out, IndexView{Name: "main", Declared: true}), true
	}
	for _, name := range s.Indexes() {
		if !seen[name] {
			out = append(out, IndexView{Name: name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// handleListIndexes is GET /v1/indexes.
func (e *configEditor) handleListIndexes(w http.ResponseWriter, r *http.Request) {
	var out []IndexView
	e.m.state.Read(func(s *fsm.State) { out = indexViews(s) })
	writeJSON(w, http.StatusOK, map[string]any{"indexes": out})
}

// handleAddIndex is POST /v1/indexes: declares an index with its retention.
// A name already declared is 409 index_exists; a bad name or period 400.
func (e *configEditor) handleAddIndex(w http.ResponseWriter, r *http.Request) {
	var req IndexRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	period, err := ParseRetentionPeriod(req.FrozenTimePeriod)
	if err != nil {
		writeError(w, toAPIError(fmt.Errorf("%w: index %q: %v", errBadRequest, req.Name, err)))
		return
	}
	if req.MaxTotalBytes < 0 || req.MaxDataSize < 0 {
		writeError(w, toAPIError(fmt.Errorf("%w: index %q: max_total_bytes %d and max_data_size %d must not be negative", errBadRequest, req.Name, req.MaxTotalBytes, req.MaxDataSize)))
		return
	}
	ic := fsm.IndexConfig{Name: req.Name, FrozenTimePeriod: period, MaxTotalBytes: req.MaxTotalBytes, MaxDataSize: req.MaxDataSize}
	ok := e.edit(w, r, func(s *fsm.State, cfg *fsm.Config) error {
		if req.Name == "main" || slices.ContainsFunc(cfg.Indexes, func(x fsm.IndexConfig) bool { return x.Name == req.Name }) {
			return &APIError{Status: http.StatusConflict, Code: "index_exists", Message: fmt.Sprintf("%v: index %q is already declared", ErrIndexExists, req.Name)}
		}
		cfg.Indexes = append(cfg.Indexes, ic)
		return nil
	})
	if !ok {
		return
	}
	var v IndexView
	e.m.state.Read(func(s *fsm.State) {
		for _, x := range indexViews(s) {
			if x.Name == req.Name {
				v = x
			}
		}
	})
	writeJSON(w, http.StatusCreated, map[string]any{"index": v})
}

// handleRemoveIndex is DELETE /v1/indexes/{name}: the index is no longer
// declared, so HEC refuses events for it (peers narrow every token to the
// declared indexes unless auto_create_indexes is on). Its buckets stay
// until retention or an operator removes them. main cannot be removed, nor
// an index a token names (409 index_in_use, naming the tokens by id); an
// undeclared name is 404 unknown_index.
func (e *configEditor) handleRemoveIndex(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ok := e.edit(w, r, func(s *fsm.State, cfg *fsm.Config) error {
		if name == "main" {
			return &APIError{Status: http.StatusConflict, Code: "index_in_use", Message: fmt.Sprintf("%v: index main always exists and cannot be removed", ErrIndexInUse)}
		}
		i := slices.IndexFunc(cfg.Indexes, func(x fsm.IndexConfig) bool { return x.Name == name })
		if i < 0 {
			return &APIError{Status: http.StatusNotFound, Code: "unknown_index", Message: fmt.Sprintf("%v: no declared index %q", fsm.ErrUnknownIndex, name)}
		}
		var users []string
		for _, t := range cfg.HECTokens {
			if slices.Contains(t.Indexes, name) || t.DefaultIndex == name {
				users = append(users, "hec "+KeyedTokenID(fsm.TokenKeyOf(s), t.Token))
			}
		}
		for _, t := range cfg.SearchTokens {
			if slices.Contains(t.Indexes, name) {
				users = append(users, "search "+KeyedTokenID(fsm.TokenKeyOf(s), t.Token))
			}
		}
		if len(users) > 0 {
			return &APIError{Status: http.StatusConflict, Code: "index_in_use", Message: fmt.Sprintf("%v: index %q is named by tokens %s; revoke them or remove it from them first", ErrIndexInUse, name, strings.Join(users, ", "))}
		}
		cfg.Indexes = slices.Delete(cfg.Indexes, i, i+1)
		return nil
	})
	if ok {
		writeJSON(w, http.StatusOK, map[string]any{"removed": name})
	}
}

// ---- tokens -----------------------------------------------------------------

// tokenViews lists the tokens of cfg by their KeyedTokenID under key.
func tokenViews(cfg fsm.Config, key []byte) []TokenView {
	var out []TokenView
	for _, t := range cfg.HECTokens {
		ack := t.Ack
		v := TokenView{ID: KeyedTokenID(key, t.Token), Kind: TokenKindHEC, Prefix: tokenPrefix(t.Token), Indexes: t.Indexes,
			DefaultIndex: t.DefaultIndex, UseAck: &ack, AllowQueryStringAuth: t.AllowQueryStringAuth, Disabled: t.Disabled,
			Host: t.Host, Source: t.Source, Sourcetype: t.Sourcetype}
		out = append(out, v)
	}
	for _, t := range cfg.SearchTokens {
		v := TokenView{ID: KeyedTokenID(key, t.Token), Kind: TokenKindSearch, Prefix: tokenPrefix(t.Token), Indexes: t.Indexes, Publish: t.Publish}
		out = append(out, v)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// handleListTokens is GET /v1/tokens: ids, kinds, prefixes, never secrets.
func (e *configEditor) handleListTokens(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("reveal") {
		// Removed: no read shows a token's secret (SPEC §7). The secret is
		// printed once, when the token is added.
		writeError(w, &APIError{Status: http.StatusBadRequest, Code: "bad_request", Message: "reveal: a token's secret is not shown by any read (SPEC §7), only once by POST /v1/tokens when it is added"})
		return
	}
	var cfg fsm.Config
	var key []byte
	e.m.state.Read(func(s *fsm.State) { cfg, key = s.Config(), fsm.TokenKeyOf(s) })
	writeJSON(w, http.StatusOK, map[string]any{"tokens": tokenViews(cfg, key)})
}

// indexDeclared: the index may be named by a token. With
// auto_create_indexes any valid name may (fsm.Config.Validate checks it).
func indexDeclared(cfg *fsm.Config, name string) bool {
	return name == "main" || cfg.AutoCreateIndexes || slices.ContainsFunc(cfg.Indexes, func(x fsm.IndexConfig) bool { return x.Name == name })
}

// handleAddToken is POST /v1/tokens. The answer (201) holds the token's
// secret: the only answer that ever shows it. A token that
// already exists (as HEC or search token) is 409 token_exists; an index
// that is not declared is 400 unknown_index.
func (e *configEditor) handleAddToken(w http.ResponseWriter, r *http.Request) {
	var req TokenRequest
	if err := decodeBody(r, &req, false); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	if req.Kind != TokenKindHEC && req.Kind != TokenKindSearch {
		writeError(w, toAPIError(fmt.Errorf("%w: token kind %q: want hec or search", errBadRequest, req.Kind)))
		return
	}
	if req.Kind == TokenKindHEC && req.Publish != nil {
		writeError(w, toAPIError(fmt.Errorf("%w: publish is a search token setting, not a HEC token one", errBadRequest)))
		return
	}
	if req.Kind == TokenKindSearch && (req.UseAck != nil || req.DefaultIndex != "" || req.AllowQueryStringAuth || req.Host != "" || req.Source != "" || req.Sourcetype != "") {
		writeError(w, toAPIError(fmt.Errorf("%w: use_ack, default_index, allow_query_string_auth, host, source and sourcetype are HEC token settings, not search token ones", errBadRequest)))
		return
	}
	for name, v := range map[string]string{"host": req.Host, "source": req.Source, "sourcetype": req.Sourcetype} {
		if len(v) > 1024 || strings.ContainsAny(v, "\n\r") {
			writeError(w, toAPIError(fmt.Errorf("%w: %s: a default of at most 1024 bytes on one line", errBadRequest, name)))
			return
		}
	}
	if req.Token == "" {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			writeError(w, toAPIError(fmt.Errorf("generate a token: %w", err)))
			return
		}
		req.Token = hex.EncodeToString(b[:])
	}
	if err := checkTokenValue(req.Token); err != nil {
		writeError(w, toAPIError(err))
		return
	}
	for _, ix := range req.Indexes {
		if ix == "" {
			writeError(w, toAPIError(fmt.Errorf("%w: empty index name in %v", errBadRequest, req.Indexes)))
			return
		}
	}
	var id string
	ok := e.edit(w, r, func(s *fsm.State, cfg *fsm.Config) error {
		key := fsm.TokenKeyOf(s)
		id = KeyedTokenID(key, req.Token)
		// Ids must stay unique in both forms: a revocation removes every
		// token either names.
		clash := func(tok string) bool {
			return tok == req.Token || TokenID(tok) == TokenID(req.Token) || KeyedTokenID(key, tok) == id
		}
		for _, t := range cfg.HECTokens {
			if clash(t.Token) {
				return &APIError{Status: http.StatusConflict, Code: "token_exists", Message: fmt.Sprintf("%v: token %s is already a HEC token", ErrTokenExists, id)}
			}
		}
		for _, t := range cfg.SearchTokens {
			if clash(t.Token) {
				return &APIError{Status: http.StatusConflict, Code: "token_exists", Message: fmt.Sprintf("%v: token %s is already a search token", ErrTokenExists, id)}
			}
		}
		for _, ix := range append(slices.Clone(req.Indexes), req.DefaultIndex) {
			if ix != "" && !indexDeclared(cfg, ix) {
				return &APIError{Status: http.StatusBadRequest, Code: "unknown_index", Message: fmt.Sprintf("%v: token scoped to index %q, which is not declared (quarry index add %s)", fsm.ErrUnknownIndex, ix, ix)}
			}
		}
		if req.Kind == TokenKindSearch {
			cfg.SearchTokens = append(cfg.SearchTokens, fsm.SearchToken{Token: req.Token, Indexes: slices.Clone(req.Indexes), Publish: slices.Clone(req.Publish)})
			return nil
		}
		t := fsm.HECToken{Token: req.Token, Indexes: slices.Clone(req.Indexes), DefaultIndex: req.DefaultIndex, Ack: true, AllowQueryStringAuth: req.AllowQueryStringAuth,
			Host: req.Host, Source: req.Source, Sourcetype: req.Sourcetype}
		if req.UseAck != nil {
			t.Ack = *req.UseAck
		}
		if t.DefaultIndex == "" && len(t.Indexes) > 0 {
			t.DefaultIndex = t.Indexes[0] // as --hec-token T=index,… reads
		}
		cfg.HECTokens = append(cfg.HECTokens, t)
		return nil
	})
	if !ok {
		return
	}
	var cfg fsm.Config
	var key []byte
	e.m.state.Read(func(s *fsm.State) { cfg, key = s.Config(), fsm.TokenKeyOf(s) })
	id = KeyedTokenID(key, req.Token)
	for _, v := range tokenViews(cfg, key) {
		if v.ID == id {
			v.Token = req.Token // shown once, to the admin who added it
			writeJSON(w, http.StatusCreated, map[string]any{"token": v})
			return
		}
	}
	writeJSON(w, http.StatusCreated, map[string]any{"token": TokenView{ID: id, Kind: req.Kind, Token: req.Token, Prefix: tokenPrefix(req.Token)}})
}

// NoSearchTokensWarning is what revoking the last search token answers.
const NoSearchTokensWarning = "no search token is left: search heads and peers that listen on loopback only and have no admin token now serve searches without a token (SPEC §7); others refuse every search but the admin token's"

// RevokeResponse answers DELETE /v1/tokens/{id}: the id of the removed
// token as GET /v1/tokens lists it (KeyedTokenID, whichever id form was
// asked), the kinds of token it removed (hec, search) and, when no search
// token is left, a warning.
type RevokeResponse struct {
	Revoked string   `json:"revoked"`
	Kinds   []string `json:"kinds"`
	Warning string   `json:"warning,omitempty"`
}

// handleRevokeToken is DELETE /v1/tokens/{id}: removes every token (HEC or
// search) with that id. Peers refuse a revoked HEC token from their next
// config refresh (one heartbeat period), search heads a revoked search
// token from the config notice. An unknown id is 404 unknown_token.
func (e *configEditor) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var (
		kinds   []string
		warning string
		listed  string
	)
	ok := e.edit(w, r, func(s *fsm.State, cfg *fsm.Config) error {
		kinds, warning, listed = nil, "", id
		key := fsm.TokenKeyOf(s)
		named := func(tok string) bool {
			if !tokenNamed(key, tok, id) {
				return false
			}
			listed = KeyedTokenID(key, tok)
			return true
		}
		n := len(cfg.HECTokens)
		cfg.HECTokens = slices.DeleteFunc(cfg.HECTokens, func(t fsm.HECToken) bool { return named(t.Token) })
		if len(cfg.HECTokens) < n {
			kinds = append(kinds, TokenKindHEC)
		}
		n = len(cfg.SearchTokens)
		cfg.SearchTokens = slices.DeleteFunc(cfg.SearchTokens, func(t fsm.SearchToken) bool { return named(t.Token) })
		if len(cfg.SearchTokens) < n {
			kinds = append(kinds, TokenKindSearch)
			if len(cfg.SearchTokens) == 0 {
				warning = NoSearchTokensWarning
			}
		}
		if len(kinds) == 0 {
			return &APIError{Status: http.StatusNotFound, Code: "unknown_token", Message: fmt.Sprintf("%v: no token with id %q", ErrUnknownToken, id)}
		}
		return nil
	})
	if ok {
		writeJSON(w, http.StatusOK, RevokeResponse{Revoked: listed, Kinds: kinds, Warning: warning})
	}
}
