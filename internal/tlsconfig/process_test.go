package tlsconfig

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestProcessCertificates (review M6): GenerateFor issues each process its
// own key and certificate — CommonName the process, one OU its role, its
// name among the DNS names — and the mutual links check the role as for a
// role certificate: two managers' own certificates speak Raft, a peer's is
// refused with its process named. A second GenerateFor removes the
// process certificates of the CA it replaces.
func TestProcessCertificates(t *testing.T) {
	dir := t.TempDir()
	procs := []Process{{"m1", RoleManager}, {"m2", RoleManager}, {"p1", RolePeer}}
	files, err := GenerateFor(dir, []string{"127.0.0.1", "localhost"}, time.Hour, nil, procs)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, p := range procs {
		f := files[ProcessKey(p.Name)]
		if f != ProcessFiles(dir, p.Name) {
			t.Fatalf("%s: files %+v", p.Name, f)
		}
		leaf := leafOf(t, f)
		if leaf.Subject.CommonName != p.Name || !slices.Equal(Roles(leaf), []string{p.Role}) || !slices.Contains(leaf.DNSNames, p.Name) || !slices.Contains(leaf.DNSNames, "localhost") {
			t.Fatalf("%s: CN %q, roles %q, DNS %q", p.Name, leaf.Subject.CommonName, Roles(leaf), leaf.DNSNames)
		}
		key, err := os.ReadFile(f.Key)
		if err != nil {
			t.Fatal(err)
		}
		if keys[string(key)] {
			t.Fatalf("%s shares a key with another process", p.Name)
		}
		keys[string(key)] = true
	}
	if _, err := os.Stat(FilesIn(dir, RoleManager).Cert); err == nil {
		t.Fatal("a role certificate was written without a role asked for")
	}
	if _, ok, err := ExistingFor(dir, nil, procs); !ok || err != nil {
		t.Fatalf("ExistingFor: %v %v", ok, err)
	}
	m1, _ := files[ProcessKey("m1")].Mutual(RaftRoles...)
	m2, _ := files[ProcessKey("m2")].Mutual(RaftRoles...)
	p1, _ := files[ProcessKey("p1")].Mutual(RaftRoles...)
	addr, errs := serve(t, m1)
	if err := dial(addr, m2); err != nil || <-errs != nil {
		t.Fatalf("m2 to m1 refused: %v", err)
	}
	addr, errs = serve(t, m1)
	_ = dial(addr, p1)
	if err := <-errs; !errors.Is(err, ErrWrongRole) || !strings.Contains(err.Error(), "CN=p1") {
		t.Fatalf("p1's own certificate on the Raft link: %v, want ErrWrongRole naming CN=p1", err)
	}
	if _, err := GenerateFor(dir, []string{"localhost"}, time.Hour, []string{RolePeer}, procs[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(ProcessFiles(dir, "p1").Cert)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("p1's certificate of the replaced CA is still there: %v", err)
	}
	for _, bad := range []string{"m1", "m1:admin", ":peer", "a_b:peer", "x:"} {
		if _, err := ParseProcess(bad); err == nil {
			t.Errorf("ParseProcess(%q) accepted", bad)
		}
	}
	if _, err := GenerateFor(t.TempDir(), []string{"localhost"}, time.Hour, nil, []Process{{"m1", RoleManager}, {"m1", RolePeer}}); err == nil {
		t.Fatal("a process named twice was accepted")
	}
}
