package bus

import (
	"errors"
	"strings"
	"testing"
)

func TestSubjects(t *testing.T) {
	var s Subjects // zero value: default prefix
	p, _ := NewSubjects("prod.quarry")
	must := func(subj string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return subj
	}
	cases := []struct{ got, want string }{
		{must(s.MgrOp("register", "p1")), "quarry.mgr.register.p1"},
		{must(s.MgrOpAny("register")), "quarry.mgr.register.*"},
		{must(s.ReplTo("site2", "p4")), "quarry.repl.site2.p4.*"},
		{s.Gen(), "quarry.gen"},
		{must(s.SearchPeer("site1", "p1")), "quarry.search.site1.p1"},
		{must(s.Repl("site2", "p-4_x", "p1")), "quarry.repl.site2.p-4_x.p1"},
		{must(s.Fixup("site1", "p1")), "quarry.fixup.site1.p1"},
		{must(s.Bundle("ab12cd")), "quarry.bundle.ab12cd"},
		{must(s.Results("errors_per_host")), "quarry.results.errors_per_host"},
		{s.All("fixup"), "quarry.fixup.>"},
		{p.Gen(), "prod.quarry.gen"},
		{must(p.Fixup("s", "p")), "prod.quarry.fixup.s.p"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestSubjectsRejectBadTokens(t *testing.T) {
	var s Subjects
	bad := []struct {
		name string
		call func() (string, error)
		want string
	}{
		{"empty site", func() (string, error) { return s.SearchPeer("", "p1") }, `site name is empty`},
		{"dot in site", func() (string, error) { return s.SearchPeer("site.1", "p1") }, `site name "site.1" contains '.'`},
		{"star in peer", func() (string, error) { return s.Fixup("site1", "p*") }, `peer name "p*" contains '*'`},
		{"gt in peer", func() (string, error) { return s.Repl("site1", ">", "p1") }, `peer name ">" contains '>'`},
		{"space in peer", func() (string, error) { return s.SearchPeer("site1", "p 1") }, `peer name "p 1" contains whitespace`},
		{"tab in op", func() (string, error) { return s.MgrOp("reg\tister", "p1") }, `op name "reg\tister" contains whitespace`},
		{"star sender", func() (string, error) { return s.MgrOp("register", "*") }, `sender name "*" contains '*'`},
		{"dot in repl sender", func() (string, error) { return s.Repl("site1", "p1", "p.2") }, `sender name "p.2" contains '.'`},
		{"newline in results", func() (string, error) { return s.Results("a\nb") }, `contains whitespace`},
		{"dot in bundle", func() (string, error) { return s.Bundle("a.b") }, `bundle hash name "a.b" contains '.'`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			subj, err := c.call()
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("got %q, %v; want ErrInvalidToken", subj, err)
			}
			if subj != "" {
				t.Errorf("got subject %q with the error", subj)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
	for _, prefix := range []string{"a..b", "a.*", "q >", "."} {
		if _, err := NewSubjects(prefix); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("prefix %q: got %v, want ErrInvalidToken", prefix, err)
		}
	}
}

func FuzzValidToken(f *testing.F) {
	for _, s := range []string{"site1", "", "a.b", "*", ">", "p 1", "ü", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var subj Subjects
		got, err := subj.Fixup(s, "p1")
		if err != nil {
			return
		}
		// A valid token yields exactly four tokens, none a wildcard.
		toks := 0
		for _, tok := range strings.Split(got, ".") {
			toks++
			if tok == "" || tok == "*" || tok == ">" {
				t.Fatalf("%q produced bad subject %q", s, got)
			}
		}
		if toks != 4 {
			t.Fatalf("%q produced %d tokens in %q", s, toks, got)
		}
	})
}
