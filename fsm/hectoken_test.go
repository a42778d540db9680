package fsm

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseHECToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want HECToken
		err  string
	}{
		{"abc", HECToken{Token: "abc", Ack: true}, ""},
		{"abc=main", HECToken{Token: "abc", Indexes: []string{"main"}, DefaultIndex: "main", Ack: true}, ""},
		{"abc=web,main", HECToken{Token: "abc", Indexes: []string{"web", "main"}, DefaultIndex: "web", Ack: true}, ""},
		{" abc = web , main ", HECToken{}, "want T[=index"},
		{"", HECToken{}, "non-empty token"},
		{"=main", HECToken{}, "non-empty token"},
		{"abc=", HECToken{}, "empty index name"},
		{"abc=web,,main", HECToken{}, "empty index name"},
	} {
		got, err := ParseHECToken(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseHECToken(%q) = %+v, %v; want error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseHECToken(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseHECToken(f *testing.F) {
	for _, s := range []string{"abc", "abc=main", "abc=web,main", "=", "a=,", " x "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseHECToken(s)
		if err != nil {
			return
		}
		if tok.Token == "" || strings.ContainsAny(tok.Token, " ,;=") {
			t.Fatalf("ParseHECToken(%q) accepted token %q", s, tok.Token)
		}
		for _, ix := range tok.Indexes {
			if ix == "" {
				t.Fatalf("ParseHECToken(%q) accepted an empty index", s)
			}
		}
		if len(tok.Indexes) > 0 && tok.DefaultIndex != tok.Indexes[0] {
			t.Fatalf("ParseHECToken(%q): default %q is not the first index", s, tok.DefaultIndex)
		}
	})
}
