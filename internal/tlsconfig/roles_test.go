package tlsconfig

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRoles: a certificate's roles are its OUs quarry-<role>; other OUs
// are ignored.
func TestRoles(t *testing.T) {
	for _, c := range []struct {
		ous  []string
		want []string
	}{
		{nil, nil},
		{[]string{"ops", "quarry-admin"}, nil},
		{[]string{"quarry-peer"}, []string{RolePeer}},
		{[]string{"quarry-bus", "ops", "quarry-manager"}, []string{RoleManager, RoleBus}},
	} {
		got := Roles(&x509.Certificate{Subject: pkix.Name{OrganizationalUnit: c.ous}})
		if !slices.Equal(got, c.want) {
			t.Errorf("OUs %q: roles %q, want %q", c.ous, got, c.want)
		}
	}
}

// TestTLSMutualRoles (review M6): two ends of a mutual link, certificates
// of one CA; a handshake is refused when the other end's certificate does
// not carry a role the link accepts — by the server when the client is
// wrong, by the client when the server is — and accepted otherwise.
// The refusal names the certificate's subject, its roles, the wanted ones
// and `quarry tls gen`.
func TestTLSMutualRoles(t *testing.T) {
	specs := []certSpec{{sub: "norole"}}
	for _, r := range AllRoles {
		specs = append(specs, certSpec{sub: r, roles: []string{r}})
	}
	files, err := generate(t.TempDir(), []string{"127.0.0.1"}, time.Hour, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		server, client string   // whose certificate each end presents
		allowed        []string // what both ends accept
		refusedBy      string   // "", "server" or "client"
		has            string   // the refused certificate's roles, as the error says
	}{
		{"raft: manager to manager", RoleManager, RoleManager, RaftRoles, "", ""},
		{"raft: peer dials a manager", RoleManager, RolePeer, RaftRoles, "server", "role peer"},
		{"raft: search head dials a manager", RoleManager, RoleSearchHead, RaftRoles, "server", "role searchhead"},
		{"raft: bus dials a manager", RoleManager, RoleBus, RaftRoles, "server", "role bus"},
		{"raft: manager dials a peer", RolePeer, RoleManager, RaftRoles, "client", "role peer"},
		{"raft: no role dials a manager", RoleManager, "norole", RaftRoles, "server", "no quarry role"},
		{"route: bus to bus", RoleBus, RoleBus, LinkRoles, "", ""},
		{"route: manager to bus", RoleBus, RoleManager, LinkRoles, "", ""},
		{"route: bus to manager", RoleManager, RoleBus, LinkRoles, "", ""},
		{"route: peer dials a bus", RoleBus, RolePeer, LinkRoles, "server", "role peer"},
		{"route: bus dials a search head", RoleSearchHead, RoleBus, LinkRoles, "client", "role searchhead"},
		{"route: bus dials a certificate with no role", "norole", RoleBus, LinkRoles, "client", "no quarry role"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := files[c.server].Mutual(c.allowed...)
			if err != nil {
				t.Fatal(err)
			}
			cli, err := files[c.client].Mutual(c.allowed...)
			if err != nil {
				t.Fatal(err)
			}
			addr, errs := serve(t, srv)
			dialErr := dial(addr, cli)
			srvErr := <-errs
			var refusal error
			switch c.refusedBy {
			case "":
				if dialErr != nil || srvErr != nil {
					t.Fatalf("refused: client %v, server %v", dialErr, srvErr)
				}
				return
			case "server":
				refusal = srvErr
				if dialErr == nil {
					t.Fatal("the client was not told it was refused")
				}
			case "client":
				refusal = dialErr
				if srvErr == nil {
					t.Fatal("the server completed a handshake the client refused")
				}
			}
			if !errors.Is(refusal, ErrWrongRole) {
				t.Fatalf("%s: want ErrWrongRole, got %v", c.refusedBy, refusal)
			}
			subject := leafOf(t, files[map[string]string{"server": c.client, "client": c.server}[c.refusedBy]]).Subject.String()
			for _, want := range []string{fmt.Sprintf("%q", subject), c.has, strings.Join(c.allowed, " or "), "quarry tls gen --roles " + c.allowed[0]} {
				if !strings.Contains(refusal.Error(), want) {
					t.Errorf("refusal %q does not say %q", refusal, want)
				}
			}
		})
	}
}
