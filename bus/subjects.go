package bus

import (
	"fmt"
	"strings"

	"github.com/quarry-dev/quarry/bus/wire"
)

// DefaultPrefix is the first subject token of every quarry subject.
const DefaultPrefix = "quarry"

// ErrInvalidToken is returned when a name that becomes a subject token (a
// site, a peer id, an op, a bundle hash, a results name, a prefix token) is
// empty or contains '.', '*', '>', whitespace or a control character.
var ErrInvalidToken = wire.ErrInvalidToken

// Subjects builds the subjects of SPEC §6 under a prefix. The zero value
// uses DefaultPrefix.
//
//	<p>.mgr.<op>.<sender>      peers, search heads → the Raft leader
//	<p>.gen                    manager → all: generation or table changed
//	<p>.search.<site>          search head → peers of a site
//	<p>.search.<site>.<peer>   search head → one peer
//	<p>.repl.<site>.<target>.<sender>  origin (or a fixup source) → target
//	<p>.fixup.<site>.<peer>    manager → peer: fixup tasks
//	<p>.bundle.<hash>          peer → search head: knowledge bundle fetch
//	<p>.results.<name>         search head → anyone: published results
//	<p>.idem.<site>.<peer>.<sender>  peer → peer: idempotency key lookups
type Subjects struct {
	prefix string
}

// NewSubjects returns the subject scheme under prefix; "" means
// DefaultPrefix. A prefix may have several tokens ("prod.quarry"), each
// valid on its own.
func NewSubjects(prefix string) (Subjects, error) {
	if prefix == "" {
		return Subjects{}, nil
	}
	for _, tok := range strings.Split(prefix, ".") {
		if err := ValidToken("prefix", tok); err != nil {
			return Subjects{}, fmt.Errorf("subject prefix %q: %w", prefix, err)
		}
	}
	return Subjects{prefix: prefix}, nil
}

// Prefix returns the prefix in use.
func (s Subjects) Prefix() string {
	if s.prefix == "" {
		return DefaultPrefix
	}
	return s.prefix
}

// ValidToken reports whether name can be one subject token; kind names what
// the token is ("site", "peer", …) in the error.
func ValidToken(kind, name string) error { return wire.ValidToken(kind, name) }

func (s Subjects) join(toks ...string) string {
	return s.Prefix() + "." + strings.Join(toks, ".")
}

func validTokens(kv ...string) error {
	for i := 0; i+1 < len(kv); i += 2 {
		if err := ValidToken(kv[i], kv[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// MgrOp is the subject of a manager operation (register, heartbeat, …)
// sent by sender (a peer id or a search head's name): the last token names
// who sends it, and permissions let a process publish only under its own
// name (SPEC §6).
func (s Subjects) MgrOp(op, sender string) (string, error) {
	if err := validTokens("op", op, "sender", sender); err != nil {
		return "", err
	}
	return s.join("mgr", op, sender), nil
}

// MgrOpAny is what the leader subscribes for one operation: every sender,
// <p>.mgr.<op>.*; SubjectSender reads who sent a request.
func (s Subjects) MgrOpAny(op string) (string, error) {
	if err := ValidToken("op", op); err != nil {
		return "", err
	}
	return s.join("mgr", op, "*"), nil
}

// SubjectSender is the last token of a subject that carries its sender
// (MgrOp, Repl); "" for a subject without tokens after the prefix.
func SubjectSender(subject string) string {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 {
		return ""
	}
	return subject[i+1:]
}

// Gen is the subject of generation / table change notices.
func (s Subjects) Gen() string { return s.join("gen") }

// SearchPeer is the subject of every search request to one peer — the
// default plan and explicit bucket lists alike; only that peer subscribes
// it, so only it learns the stream invite inside (SECURITY.md, M4). There
// is no site-wide search subject: one request to every peer of a site
// would show each peer the others' invites.
func (s Subjects) SearchPeer(site, peer string) (string, error) {
	if err := validTokens("site", site, "peer", peer); err != nil {
		return "", err
	}
	return s.join("search", site, peer), nil
}

// Repl is the subject sender (a bucket's origin, or the source of a fixup
// copy) sends replication requests to target peer of site on.
func (s Subjects) Repl(site, target, sender string) (string, error) {
	if err := validTokens("site", site, "peer", target, "sender", sender); err != nil {
		return "", err
	}
	return s.join("repl", site, target, sender), nil
}

// ReplTo is what a target subscribes: every sender's replication requests,
// <p>.repl.<site>.<target>.*; the handler reads the sender (SubjectSender).
func (s Subjects) ReplTo(site, target string) (string, error) {
	if err := validTokens("site", site, "peer", target); err != nil {
		return "", err
	}
	return s.join("repl", site, target, "*"), nil
}

// Idem is the subject sender (a peer) asks peer of site on whether it
// holds an idempotency key (peer/DESIGN.md "Idempotent retries").
func (s Subjects) Idem(site, peer, sender string) (string, error) {
	if err := validTokens("site", site, "peer", peer, "sender", sender); err != nil {
		return "", err
	}
	return s.join("idem", site, peer, sender), nil
}

// IdemTo is what a peer subscribes: every sender's key lookups,
// <p>.idem.<site>.<peer>.*; the handler reads the sender (SubjectSender).
func (s Subjects) IdemTo(site, peer string) (string, error) {
	if err := validTokens("site", site, "peer", peer); err != nil {
		return "", err
	}
	return s.join("idem", site, peer, "*"), nil
}

// Fixup is the fixup-task subject of a peer.
func (s Subjects) Fixup(site, peer string) (string, error) {
	if err := validTokens("site", site, "peer", peer); err != nil {
		return "", err
	}
	return s.join("fixup", site, peer), nil
}

// Bundle is the subject a knowledge bundle is fetched on.
func (s Subjects) Bundle(hash string) (string, error) {
	if err := ValidToken("bundle hash", hash); err != nil {
		return "", err
	}
	return s.join("bundle", hash), nil
}

// Results is the subject search results are published on.
func (s Subjects) Results(name string) (string, error) {
	if err := ValidToken("results", name); err != nil {
		return "", err
	}
	return s.join("results", name), nil
}

// Alerts is <prefix>.alerts.<name>: where a saved search's alert is
// published (SPEC §5).
func (s Subjects) Alerts(name string) (string, error) {
	if err := ValidToken("alerts", name); err != nil {
		return "", err
	}
	return s.join("alerts", name), nil
}

// All is the wildcard subject of one family ("mgr", "search", "repl",
// "fixup", "bundle", "results"): <prefix>.<family>.>. Used by permissions and
// by monitoring subscribers.
func (s Subjects) All(family string) string { return s.join(family, ">") }
