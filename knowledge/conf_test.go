package knowledge

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseConf(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Stanza
	}{
		{"empty", "", nil},
		{"comments and blanks", "# c\n\n   # indented\n\t\n", nil},
		{"default before any stanza", "A = 1\n[x]\nB=2\n", []Stanza{
			{Name: "default", Line: 1, Keys: []KV{{"A", "1", 1}}},
			{Name: "x", Line: 2, Keys: []KV{{"B", "2", 3}}},
		}},
		{"whitespace trimmed", "[ st ]  \n  KEY   =   a b  \n", []Stanza{
			{Name: "st", Line: 1, Keys: []KV{{"KEY", "a b", 2}}},
		}},
		{"first = splits", "[s]\nK = a=b\n", []Stanza{{Name: "s", Line: 1, Keys: []KV{{"K", "a=b", 2}}}}},
		{"empty value", "[s]\nK =\n", []Stanza{{Name: "s", Line: 1, Keys: []KV{{"K", "", 2}}}}},
		{"duplicate key last wins", "[s]\nA = 1\nB = 2\nA = 3\n", []Stanza{
			{Name: "s", Line: 1, Keys: []KV{{"A", "3", 4}, {"B", "2", 3}}},
		}},
		{"stanza written twice merges", "[s]\nA = 1\n[t]\nC = 1\n[s]\nB = 2\n", []Stanza{
			{Name: "s", Line: 1, Keys: []KV{{"A", "1", 2}, {"B", "2", 6}}},
			{Name: "t", Line: 3, Keys: []KV{{"C", "1", 4}}},
		}},
		{"explicit default merges with implicit", "A = 1\n[default]\nB = 2\n", []Stanza{
			{Name: "default", Line: 1, Keys: []KV{{"A", "1", 1}, {"B", "2", 3}}},
		}},
		{"continuation joined with newline", "[s]\nK = one \\\ntwo\\\n three\nL = x\n", []Stanza{
			{Name: "s", Line: 1, Keys: []KV{{"K", "one \ntwo\n three", 2}, {"L", "x", 5}}},
		}},
		{"continuation at end of file", "[s]\nK = v\\", []Stanza{{Name: "s", Line: 1, Keys: []KV{{"K", "v", 2}}}}},
		{"crlf", "[s]\r\nK = v\r\n", []Stanza{{Name: "s", Line: 1, Keys: []KV{{"K", "v", 2}}}}},
		{"source stanza", "[source::/var/log/.../*.log]\nTZ = UTC\n", []Stanza{
			{Name: "source::/var/log/.../*.log", Line: 1, Keys: []KV{{"TZ", "UTC", 2}}},
		}},
		{"comment does not continue", "[s]\n# c \\\nK = v\n", []Stanza{{Name: "s", Line: 1, Keys: []KV{{"K", "v", 3}}}}},
		{"regex value kept verbatim", "[s]\nLINE_BREAKER = ([\\r\\n]+)\\d{4}-\n", []Stanza{
			{Name: "s", Line: 1, Keys: []KV{{"LINE_BREAKER", `([\r\n]+)\d{4}-`, 2}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConf("props.conf", []byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseConfErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"[s]\nnot a setting\n", `props.conf:2: malformed line "not a setting"`},
		{"[s\n", `props.conf:1: malformed stanza header "[s"`},
		{"# c\n[]\n", "props.conf:2: empty stanza name"},
		{"[s]\n = v\n", "props.conf:2: malformed line"},
		{"[s]\nA = 1 \\\nB\nbad\n", "props.conf:4: malformed line"},
		{"[s] # comment\n", "props.conf:1: malformed stanza header"},
	}
	for _, tt := range tests {
		_, err := ParseConf("props.conf", []byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseConf(%q) = %v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestStanzaGet(t *testing.T) {
	st, err := ParseConf("x.conf", []byte("[s]\nA = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := st[0].Get("A"); !ok || v != "1" {
		t.Errorf("Get(A) = %q, %v", v, ok)
	}
	if _, ok := st[0].Get("B"); ok {
		t.Error("Get(B) found a key that is not there")
	}
}
