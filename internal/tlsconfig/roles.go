package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The roles a quarry certificate names (review M6). A certificate carries a
// role as an OrganizationalUnit of its Subject, OUPrefix + role
// ("OU=quarry-manager"); it may carry several.
const (
	RoleManager    = "manager"
	RoleBus        = "bus"
	RolePeer       = "peer"
	RoleSearchHead = "searchhead"
)

// OUPrefix starts every role's OrganizationalUnit.
const OUPrefix = "quarry-"

// AllRoles lists the roles in the order `quarry tls gen` writes them.
var AllRoles = []string{RoleManager, RoleBus, RolePeer, RoleSearchHead}

// The roles each mutual link accepts at its other end: Raft between
// managers only; NATS routes and gateways between bus nodes, and managers
// (a manager may run an embedded NATS node with --nats-listen).
var (
	RaftRoles = []string{RoleManager}
	LinkRoles = []string{RoleBus, RoleManager}
)

// ErrWrongRole: the other end of a mutual link presented a certificate of
// the CA that does not carry a role the link accepts.
var ErrWrongRole = errors.New("certificate does not carry a role this link accepts")

// IsRole reports whether r is one of AllRoles.
func IsRole(r string) bool { return slices.Contains(AllRoles, r) }

// RoleOU is the OrganizationalUnit that names role in a certificate.
func RoleOU(role string) string { return OUPrefix + role }

// Roles returns the quarry roles cert carries (its Subject's
// OrganizationalUnits OUPrefix+role), in AllRoles order; an OU that names
// no known role is ignored. Nil for a certificate with no quarry role.
func Roles(cert *x509.Certificate) []string {
	var out []string
	for _, r := range AllRoles {
		if slices.Contains(cert.Subject.OrganizationalUnit, RoleOU(r)) {
			out = append(out, r)
		}
	}
	return out
}

// checkRoles refuses a role list that is empty or names an unknown role:
// a mutual link must say whom it accepts.
func checkRoles(allowed []string) error {
	if len(allowed) == 0 {
		return errors.New("mutual TLS: no role allowed at the other end")
	}
	for _, r := range allowed {
		if !IsRole(r) {
			return fmt.Errorf("mutual TLS: unknown role %q (roles: %s)", r, strings.Join(AllRoles, ", "))
		}
	}
	return nil
}

// verifyRole is a tls.Config.VerifyConnection that accepts the other end
// only when its verified leaf certificate carries one of allowed. It runs
// after the chain is verified against the CA, on whichever end: a server
// checks its client, a client the server it dialled.
func verifyRole(allowed []string) func(tls.ConnectionState) error {
	allowed = slices.Clone(allowed)
	return func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return fmt.Errorf("%w: no verified certificate from the other end", ErrWrongRole)
		}
		leaf := cs.VerifiedChains[0][0]
		has := Roles(leaf)
		for _, r := range has {
			if slices.Contains(allowed, r) {
				return nil
			}
		}
		return wrongRole(leaf, has, allowed)
	}
}

// wrongRole is the refusal of a certificate: whose it is, what it carries,
// what the link wants, and how to get a right one.
func wrongRole(leaf *x509.Certificate, has, allowed []string) error {
	carries := "no quarry role (no OU " + OUPrefix + "…)"
	if len(has) > 0 {
		carries = "role " + strings.Join(has, ", ")
	}
	want := make([]string, len(allowed))
	for i, r := range allowed {
		want[i] = "OU=" + RoleOU(r)
	}
	return fmt.Errorf("%w: certificate %q carries %s, this link wants role %s (%s); "+
		"the process at the other end needs a %s certificate: `quarry tls gen --roles %s` writes one, or have your CA issue one whose Subject has %s",
		ErrWrongRole, leaf.Subject.String(), carries, strings.Join(allowed, " or "), strings.Join(want, " or "),
		allowed[0], allowed[0], want[0])
}
