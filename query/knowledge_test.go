package query

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/knowledge"
)

// testBundle: sourcetype app gets user and code from an EXTRACT-, action
// from a REPORT- transform, an alias, an EVAL-, and an automatic lookup of
// the user's team; eventtypes and tags name some of it.
var testBundle = knowledge.Files{
	"props.conf": []byte(`[app]
EXTRACT-user = usr:(?<user>[a-z]+)/(?<code>\d+)
REPORT-act = act
FIELDALIAS-who = user AS account
EVAL-slow = if(code >= 500, "yes", "no")
LOOKUP-team = teams user OUTPUT team
KV_MODE = none
`),
	"transforms.conf": []byte(`[act]
REGEX = \bdid-(\w+)
FORMAT = action::$1

[teams]
filename = teams.csv
`),
	"lookups/teams.csv": []byte("user,team\nann,red\nbob,blue\n"),
	"eventtypes.conf":   []byte("[failures]\nsearch = sourcetype=app slow=yes\n\n[annies]\nsearch = user=ann\n"),
	"tags.conf":         []byte("[eventtype=failures]\nbad = enabled\n\n[team=blue]\nbad = enabled\n"),
}

func knowledgeSegment() []Segment {
	var evs []Event
	users := []string{"ann", "bob", "cy"}
	for i := 0; i < 30; i++ {
		raw := fmt.Sprintf("t%d usr:%s/%d did-%s k=v%d", i, users[i%3], 200+100*(i%4), []string{"read", "write"}[i%2], i)
		evs = append(evs, Event{Time: int64(i+1) * 1e9, Raw: raw, Host: "h", Source: "s", Sourcetype: "app", Index: "main"})
	}
	evs = append(evs, Event{Time: 100e9, Raw: "usr:ann/999 other sourcetype k=x", Sourcetype: "plain", Index: "main",
		Fields: []Field{{Name: "team", Value: "indexed"}}})
	return []Segment{NewMemSegment("main~1~g", "main", evs[:15]), NewMemSegment("main~2~g", "main", evs[15:])}
}

func searchK(t *testing.T, k *Knowledge, q string) *Response {
	t.Helper()
	resp, err := Search(context.Background(), Request{Query: q, Now: time.Unix(1000, 0), Knowledge: k}, knowledgeSegment())
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return resp
}

// TestKnowledgeBundle: every kind of search-time knowledge, through
// filtering, aggregation and rows, equals what the fields say by hand;
// values that are no term of _raw (EVAL, alias, lookup) are still found.
func TestKnowledgeBundle(t *testing.T) {
	b, err := knowledge.ParseSearchBundle(testBundle)
	if err != nil {
		t.Fatal(err)
	}
	k, err := CompileKnowledge(b)
	if err != nil {
		t.Fatal(err)
	}
	count := func(q string) string {
		r := searchK(t, k, q+" | stats count")
		return fmt.Sprint(r.Results[0]["count"])
	}
	for _, c := range []struct {
		q    string
		want string
	}{
		{"user=ann", "10"},         // EXTRACT (+ the plain event: its own auto kv has no user)
		{"account=bob", "10"},      // FIELDALIAS
		{"code=500", "7"},          // i%4 == 3
		{"slow=yes", "7"},          // EVAL: code 500 only (200, 300, 400, 500 cycle)
		{"team=red", "10"},         // LOOKUP
		{"team=indexed", "1"},      // an indexed field is never replaced
		{"action=write", "15"},     // REPORT with FORMAT
		{"k=v1", "0"},              // KV_MODE = none for app
		{"eventtype=annies", "10"}, // eventtype
		{"eventtype=nosuch", "0"},  // unknown eventtype: nothing
		{"tag=bad", "15"},          // failures (7) ∪ team=blue (10), 2 both
		{"eventtype=ann*", "10"},   // glob
		{"NOT eventtype=annies", "21"},
	} {
		if got := count(c.q); got != c.want {
			t.Errorf("%s | stats count = %s, want %s", c.q, got, c.want)
		}
	}
	r := searchK(t, k, "sourcetype=app user=bob | stats count by team, account")
	if len(r.Results) != 1 || r.Results[0]["team"] != "blue" || r.Results[0]["account"] != "bob" {
		t.Fatalf("stats by team, account: %+v", r.Results)
	}
	r = searchK(t, k, "sourcetype=app t3 | lookup teams user AS account OUTPUT team AS squad | table user squad slow")
	if len(r.Results) != 1 || r.Results[0]["squad"] != "red" || r.Results[0]["slow"] != "yes" {
		t.Fatalf("lookup command: %+v", r.Results)
	}
	// Without the bundle: none of its fields, and lookup is refused.
	if _, err := Search(context.Background(), Request{Query: "* | lookup teams user"}, knowledgeSegment()); err == nil || !strings.Contains(err.Error(), "no knowledge bundle") {
		t.Fatalf("lookup without a bundle: %v", err)
	}
	if _, err := Search(context.Background(), Request{Query: "* | lookup nosuch user", Knowledge: k}, knowledgeSegment()); err == nil || !strings.Contains(err.Error(), "no such lookup") {
		t.Fatalf("unknown lookup: %v", err)
	}
	if got := fmt.Sprint(searchK(t, nil, "user=ann | stats count").Results[0]["count"]); got != "0" {
		t.Fatalf("user=ann with no bundle: %s", got)
	}
}

// TestKnowledgeBundleErrors: a bad bundle is refused whole, naming the file
// and line.
func TestKnowledgeBundleErrors(t *testing.T) {
	for _, c := range []struct {
		files knowledge.Files
		want  string
	}{
		{knowledge.Files{"props.conf": []byte("[app]\nEXTRACT-x = (?<a>[\n")}, "props.conf:2"},
		{knowledge.Files{"props.conf": []byte("[app]\nEXTRACT-x = no groups\n")}, "props.conf:2"},
		{knowledge.Files{"props.conf": []byte("[app]\n\nKV_MODE = xml\n")}, "props.conf:3"},
		{knowledge.Files{"props.conf": []byte("[app]\nREPORT-x = missing\n")}, "props.conf:2"},
		{knowledge.Files{"props.conf": []byte("[app]\nLOOKUP-x = nosuch user\n")}, "props.conf:2"},
		{knowledge.Files{"transforms.conf": []byte("[t]\nfilename = gone.csv\n")}, "transforms.conf:1"},
		{knowledge.Files{"tags.conf": []byte("[nofield]\nx = enabled\n")}, "tags.conf:1"},
		{knowledge.Files{"eventtypes.conf": []byte("[e]\nsearch =\n")}, "eventtypes.conf:1"},
		{knowledge.Files{"inputs.conf": []byte("[x]\n")}, "inputs.conf"},
		{knowledge.Files{"props.conf": []byte("[source::/x]\nEXTRACT-a = (?<a>.)\n")}, "props.conf:1"},
	} {
		_, err := knowledge.ParseSearchBundle(c.files)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.files, err, c.want)
		}
	}
	b, err := knowledge.ParseSearchBundle(knowledge.Files{"props.conf": []byte("[app]\nEVAL-x = 1 +\n")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CompileKnowledge(b); err == nil || !strings.Contains(err.Error(), "props.conf:2") {
		t.Fatalf("bad EVAL: %v, want props.conf:2", err)
	}
}
