package bus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
)

// Role is what a NATS user is allowed to do on the bus (SPEC §11).
type Role string

// The roles. The permission table is in DESIGN.md and in rolePermissions.
const (
	RoleAdmin      Role = "admin"      // everything (operators, the bus's own credentials)
	RoleManager    Role = "manager"    // serves mgr ops, publishes gen and fixup tasks
	RolePeer       Role = "peer"       // replication, manager ops; never fixup tasks
	RoleSearchHead Role = "searchhead" // searches, results; never replication or fixup
	// RoleSubscriber is an outside subscriber (`nats sub`, a dashboard): it
	// may listen to published results and generation notices, nothing else,
	// and publish nothing.
	RoleSubscriber Role = "subscriber"
)

// InboxPrefix is the first token of every reply inbox. A connection made
// by Connect with a user takes replies under _INBOX.<user>. (UserInbox,
// nats.CustomInboxPrefix), and a user may subscribe only there, so no role
// reads another's replies, stream chunks or credits; every role may
// publish to _INBOX.> (a reply, a stream frame or a credit reaches its
// requester whoever that is).
const InboxPrefix = "_INBOX"

// UserInbox is the inbox prefix of user's connections: _INBOX.<user>.
func UserInbox(user string) string { return InboxPrefix + "." + user }

// User is one NATS user of a role. For RolePeer, Site and Peer (both or
// neither) narrow it to that one peer: it publishes manager operations and
// replication only under its own id and subscribes only its own subjects.
// For RoleSearchHead, Head narrows it the same way to that search head's
// name (the sender of its manager operations).
type User struct {
	Name     string
	Password string
	Role     Role
	Site     string
	Peer     string
	Head     string
}

// ParseRoleUser parses a `--role-user` value:
//
//	ROLE=NAME:PASSWORD            manager=mgr:s3cret
//	peer/SITE/PEER=NAME:PASSWORD  peer/site1/p1=p1:s3cret
//	searchhead/HEAD=NAME:PASSWORD searchhead/sh1=sh1:s3cret
//
// The password is everything after the first ':' of the right-hand side.
func ParseRoleUser(v string) (User, error) {
	spec, cred, ok := strings.Cut(v, "=")
	if !ok {
		return User{}, fmt.Errorf("role user %q: want ROLE=NAME:PASSWORD", v)
	}
	name, pass, ok := strings.Cut(cred, ":")
	if !ok || name == "" || pass == "" {
		return User{}, fmt.Errorf("role user %q: want ROLE=NAME:PASSWORD with a non-empty name and password", spec)
	}
	u := User{Name: name, Password: pass}
	parts := strings.Split(spec, "/")
	u.Role = Role(parts[0])
	switch {
	case len(parts) == 1:
	case len(parts) == 3 && u.Role == RolePeer:
		u.Site, u.Peer = parts[1], parts[2]
	case len(parts) == 2 && u.Role == RoleSearchHead:
		u.Head = parts[1]
	default:
		return User{}, fmt.Errorf("role user %q: role is ROLE, peer/SITE/PEER or searchhead/HEAD", spec)
	}
	if err := u.validate(); err != nil {
		return User{}, err
	}
	return u, nil
}

func (u User) validate() error {
	switch u.Role {
	case RoleAdmin, RoleManager, RolePeer, RoleSearchHead, RoleSubscriber:
	default:
		return fmt.Errorf("user %q: unknown role %q (want admin, manager, peer, searchhead or subscriber)", u.Name, u.Role)
	}
	if u.Name == "" || u.Password == "" {
		return fmt.Errorf("user %q of role %s: name and password are required", u.Name, u.Role)
	}
	// The name is a token of the user's inbox subject (_INBOX.<name>.>).
	if err := ValidToken("user", u.Name); err != nil {
		return err
	}
	if (u.Site == "") != (u.Peer == "") {
		return fmt.Errorf("user %q: site and peer go together", u.Name)
	}
	if u.Site != "" {
		if u.Role != RolePeer {
			return fmt.Errorf("user %q: only a peer user is narrowed to a site and peer", u.Name)
		}
		if err := validTokens("site", u.Site, "peer", u.Peer); err != nil {
			return fmt.Errorf("user %q: %w", u.Name, err)
		}
	}
	if u.Head != "" {
		if u.Role != RoleSearchHead {
			return fmt.Errorf("user %q: only a search head user is narrowed to a head", u.Name)
		}
		if err := ValidToken("search head", u.Head); err != nil {
			return fmt.Errorf("user %q: %w", u.Name, err)
		}
	}
	return nil
}

// Permissions are the publish / subscribe allow and deny lists of a role.
type Permissions struct {
	PubAllow, PubDeny, SubAllow, SubDeny []string
}

// replDefaultSite is fsm.DefaultSite (bus imports nothing of ours): a peer
// of a named site also answers replication and searches under it, since a
// single-site cluster lists every peer under the default site.
const replDefaultSite = "default"

// SearchHeadOps are the manager operations a search head may send (the
// generation table, the peer config, the saved-search scheduler's list,
// claim and finish); never register, heartbeat or any other peer
// operation.
var SearchHeadOps = []string{"generation", "config", "savedsearch"}

// RolePermissions returns the permissions of user u under the subject
// scheme s (DESIGN.md's table). A peer narrowed to Site/Peer publishes
// manager operations and replication only under its own id; a search head
// narrowed to Head only its own SearchHeadOps. Every user subscribes only
// its own inbox. RoleAdmin has no lists: it may do everything.
func RolePermissions(s Subjects, u User) (Permissions, error) {
	pubInbox := InboxPrefix + ".>"
	subInbox := InboxPrefix + ".>"
	if u.Name != "" {
		if err := ValidToken("user", u.Name); err != nil {
			return Permissions{}, err
		}
		subInbox = UserInbox(u.Name) + ".>"
	}
	switch u.Role {
	case RoleAdmin:
		return Permissions{}, nil
	case RoleManager:
		return Permissions{
			PubAllow: []string{s.Gen(), s.All("fixup"), s.All("mgr"), pubInbox},
			PubDeny:  []string{s.All("repl"), s.All("search"), s.All("idem")},
			SubAllow: []string{s.All("mgr"), s.Gen(), subInbox},
		}, nil
	case RolePeer:
		pub := []string{s.All("mgr"), s.All("repl"), s.All("idem"), s.All("bundle"), pubInbox}
		sub := []string{s.Gen(), s.All("search"), s.All("repl"), s.All("idem"), s.All("fixup"), subInbox}
		if u.Site != "" || u.Peer != "" {
			if err := validTokens("site", u.Site, "peer", u.Peer); err != nil {
				return Permissions{}, err
			}
			pub = []string{s.join("mgr", "*", u.Peer), s.join("repl", "*", "*", u.Peer), s.join("idem", "*", "*", u.Peer), s.All("bundle"), pubInbox}
			// Searches: its own subject only, never the site's or another
			// peer's, so it never sees another peer's stream invite (M4).
			searchPeer, _ := s.SearchPeer(u.Site, u.Peer)
			repl, _ := s.ReplTo(u.Site, u.Peer)
			fixup, _ := s.Fixup(u.Site, u.Peer)
			idem, _ := s.IdemTo(u.Site, u.Peer)
			sub = []string{s.Gen(), searchPeer, repl, idem, fixup, subInbox}
			if u.Site != replDefaultSite {
				// The peer also subscribes the default site's replication,
				// search and key lookup subjects (peer/cluster.go,
				// peer/search.go, peer/idemkeys.go).
				dflt, _ := s.ReplTo(replDefaultSite, u.Peer)
				dsearchPeer, _ := s.SearchPeer(replDefaultSite, u.Peer)
				didem, _ := s.IdemTo(replDefaultSite, u.Peer)
				sub = append(sub, dflt, dsearchPeer, didem)
			}
		}
		return Permissions{
			PubAllow: pub,
			// Never the saved-search scheduler's operation (a search head's)
			// nor alerts, though mgr.*.<peer> would match it.
			PubDeny:  []string{s.All("fixup"), s.Gen(), s.All("search"), s.All("results"), s.All("alerts"), s.join("mgr", "savedsearch", ">")},
			SubAllow: sub,
		}, nil
	case RoleSearchHead:
		sender := "*"
		if u.Head != "" {
			if err := ValidToken("search head", u.Head); err != nil {
				return Permissions{}, err
			}
			sender = u.Head
		}
		pub := make([]string, 0, len(SearchHeadOps)+4)
		for _, op := range SearchHeadOps {
			pub = append(pub, s.join("mgr", op, sender))
		}
		pub = append(pub, s.All("search"), s.All("results"), s.All("alerts"), pubInbox)
		return Permissions{
			PubAllow: pub,
			PubDeny:  []string{s.All("repl"), s.All("fixup"), s.All("idem"), s.Gen(), s.join("mgr", "register", ">"), s.join("mgr", "heartbeat", ">")},
			SubAllow: []string{s.Gen(), s.All("bundle"), s.All("results"), subInbox},
		}, nil
	case RoleSubscriber:
		return Permissions{
			PubDeny:  []string{">"},
			SubAllow: []string{s.Gen(), s.All("results"), s.All("alerts")},
		}, nil
	}
	return Permissions{}, fmt.Errorf("unknown role %q", u.Role)
}

func (p Permissions) server() *server.Permissions {
	if p.PubAllow == nil && p.PubDeny == nil && p.SubAllow == nil && p.SubDeny == nil {
		return nil
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: p.PubAllow, Deny: p.PubDeny},
		Subscribe: &server.SubjectPermission{Allow: p.SubAllow, Deny: p.SubDeny},
	}
}

// buildUsers turns the admin credentials and role users into nats-server
// users, refusing duplicates and invalid users.
func buildUsers(s Subjects, adminUser, adminPass string, users []User) ([]*server.User, error) {
	all := append([]User(nil), users...)
	if adminUser != "" {
		all = append(all, User{Name: adminUser, Password: adminPass, Role: RoleAdmin})
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	out := make([]*server.User, 0, len(all))
	for i, u := range all {
		if err := u.validate(); err != nil {
			return nil, err
		}
		if i > 0 && all[i-1].Name == u.Name {
			return nil, fmt.Errorf("user %q is defined twice", u.Name)
		}
		p, err := RolePermissions(s, u)
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", u.Name, err)
		}
		out = append(out, &server.User{Username: u.Name, Password: u.Password, Permissions: p.server()})
	}
	return out, nil
}

// AuthorizationConfig renders the users and role permissions as the
// `authorization` block of a nats-server configuration file (JSON, which
// nats-server's config parser accepts), for deployments that run their own
// NATS instead of `quarry bus`. adminUser/adminPass may be empty.
func AuthorizationConfig(s Subjects, adminUser, adminPass string, users []User) ([]byte, error) {
	built, err := buildUsers(s, adminUser, adminPass, users)
	if err != nil {
		return nil, err
	}
	type subjPerm struct {
		Allow []string `json:"allow,omitempty"`
		Deny  []string `json:"deny,omitempty"`
	}
	type perms struct {
		Publish   subjPerm `json:"publish"`
		Subscribe subjPerm `json:"subscribe"`
	}
	type user struct {
		User        string `json:"user"`
		Password    string `json:"password"`
		Permissions *perms `json:"permissions,omitempty"`
	}
	out := struct {
		Authorization struct {
			Users []user `json:"users"`
		} `json:"authorization"`
	}{}
	for _, u := range built {
		cu := user{User: u.Username, Password: u.Password}
		if p := u.Permissions; p != nil {
			cu.Permissions = &perms{
				Publish:   subjPerm{Allow: p.Publish.Allow, Deny: p.Publish.Deny},
				Subscribe: subjPerm{Allow: p.Subscribe.Allow, Deny: p.Subscribe.Deny},
			}
		}
		out.Authorization.Users = append(out.Authorization.Users, cu)
	}
	// nats-server's parser knows no \uXXXX escapes: keep '>' and friends
	// literal, and refuse control characters (which JSON would escape so).
	for _, u := range out.Authorization.Users {
		if strings.ContainsFunc(u.User+u.Password, unicode.IsControl) {
			return nil, fmt.Errorf("user %q: control characters in a name or password cannot be written to a nats-server config", u.User)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
