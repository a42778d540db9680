package fsm

import (
	"encoding/json"
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
		{"abc:useack=false", HECToken{Token: "abc"}, ""},
		{"abc=web,main:useack=false", HECToken{Token: "abc", Indexes: []string{"web", "main"}, DefaultIndex: "web"}, ""},
		{"abc=web:useack=true", HECToken{Token: "abc", Indexes: []string{"web"}, DefaultIndex: "web", Ack: true}, ""},
		{"abc:useACK=false", HECToken{Token: "abc"}, ""},
		{"abc:allowquerystringauth=true", HECToken{Token: "abc", Ack: true, AllowQueryStringAuth: true}, ""},
		{"abc:useack=false:allowquerystringauth=true", HECToken{Token: "abc", AllowQueryStringAuth: true}, ""},
		{"abc:useack=no", HECToken{}, "must be true or false"},
		{"abc:useack", HECToken{}, "want useack=true|false"},
		{"abc:useack=false:useack=true", HECToken{}, "each once"},
		{"abc:ack=false", HECToken{}, `unknown option "ack"`},
		{"abc:", HECToken{}, "want useack=true|false"},
		{":useack=false", HECToken{}, "non-empty token"},
		{"abc=web,,main", HECToken{}, "empty index name"},
		{"abc=web:sourcetype=syslog:host=web-1:source=/var/log/x", HECToken{Token: "abc", Indexes: []string{"web"}, DefaultIndex: "web", Ack: true,
			Sourcetype: "syslog", Host: "web-1", Source: "/var/log/x"}, ""},
		{"abc:useack=false:sourcetype=app", HECToken{Token: "abc", Sourcetype: "app"}, ""},
		{"abc:host=", HECToken{}, "a default host of 1 to 1024 bytes"},
		{"abc:sourcetype=a:sourcetype=b", HECToken{}, "each once"},
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
	for _, s := range []string{"abc", "abc=main", "abc=web,main", "=", "a=,", " x ", "abc=web:useack=false", "a:useack=true:allowquerystringauth=true", "a:b:c", "a=b:useack"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseHECToken(s)
		if err != nil {
			return
		}
		if tok.Token == "" || strings.ContainsAny(tok.Token, " ,;=:") {
			t.Fatalf("ParseHECToken(%q) accepted token %q", s, tok.Token)
		}
		for _, ix := range tok.Indexes {
			if ix == "" {
				t.Fatalf("ParseHECToken(%q) accepted an empty index", s)
			}
		}
		for _, ix := range tok.Indexes {
			if strings.Contains(ix, ":") {
				t.Fatalf("ParseHECToken(%q) accepted index %q holding an option", s, ix)
			}
		}
		if !strings.Contains(s, ":") && (!tok.Ack || tok.AllowQueryStringAuth) {
			t.Fatalf("ParseHECToken(%q): options changed without an option: %+v", s, tok)
		}
		if len(tok.Indexes) > 0 && tok.DefaultIndex != tok.Indexes[0] {
			t.Fatalf("ParseHECToken(%q): default %q is not the first index", s, tok.DefaultIndex)
		}
	})
}

// TestHECTokenJSON pins the cluster config's token shape: use_ack is read
// (absent: true), "ack" from configs committed before use_ack still counts,
// and the encoding names use_ack.
func TestHECTokenJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want HECToken
	}{
		{`{"token":"t1","indexes":["web"]}`, HECToken{Token: "t1", Indexes: []string{"web"}, Ack: true}},
		{`{"token":"t1","use_ack":false}`, HECToken{Token: "t1"}},
		{`{"token":"t1","use_ack":true}`, HECToken{Token: "t1", Ack: true}},
		{`{"token":"t1","ack":false}`, HECToken{Token: "t1"}},
		{`{"token":"t1","ack":false,"use_ack":true}`, HECToken{Token: "t1", Ack: true}},
		{`{"token":"t1","allow_query_string_auth":true,"disabled":true}`, HECToken{Token: "t1", Ack: true, AllowQueryStringAuth: true, Disabled: true}},
	} {
		var got HECToken
		if err := json.Unmarshal([]byte(tc.in), &got); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.in, got, tc.want)
		}
		b, _ := json.Marshal(got)
		var again HECToken
		if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("%s: round trip through %s gave %+v, %v", tc.in, b, again, err)
		}
	}
	b, _ := json.Marshal(HECToken{Token: "t1"})
	if string(b) != `{"token":"t1","use_ack":false,"ack":false}` {
		t.Errorf("encoding %s, want use_ack named (and ack for older versions)", b)
	}
	b, _ = json.Marshal(HECToken{Token: "t1", Ack: true, Indexes: []string{"web"}})
	if string(b) != `{"token":"t1","indexes":["web"],"use_ack":true,"ack":true}` {
		t.Errorf("encoding %s", b)
	}
	for _, bad := range []string{`{"token":5}`, `{"token":"t","useack":false}`, `{"token":"t"} {}`} {
		if err := json.Unmarshal([]byte(bad), new(HECToken)); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
}

// FuzzHECTokenJSON: any JSON the config API is sent either fails to decode
// or decodes to a token that encodes and decodes to itself.
func FuzzHECTokenJSON(f *testing.F) {
	for _, s := range []string{`{"token":"t","indexes":["a"],"use_ack":false}`, `{"token":"t","ack":true}`, `{}`, `null`, `{"use_ack":null}`, `[]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var tok HECToken
		if json.Unmarshal([]byte(s), &tok) != nil {
			return
		}
		b, err := json.Marshal(tok)
		if err != nil {
			t.Fatal(err)
		}
		var again HECToken
		if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, tok) {
			t.Fatalf("%s -> %+v -> %s -> %+v, %v", s, tok, b, again, err)
		}
	})
}
