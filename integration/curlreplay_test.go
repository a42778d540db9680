package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A small replay of README curl examples with net/http: enough shell to
// read them (quotes, $VAR and ${VAR}, comments, VAR=value lines, and
// VAR=$(curl … | jq -r .key)), and enough curl to send them (-s -S -k -f,
// -X, -H, -d/--data/--data-raw, --data-urlencode, -u, -G/--get).

// readmeBlock returns the README's sh block marked
// `<!-- runnable: NAME … -->` on the line before its fence.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "<!-- runnable: "+name+" ") || !strings.HasPrefix(lines[i+1], "```sh") {
			continue
		}
		var body []string
		for j := i + 2; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			body = append(body, lines[j])
		}
		return strings.Join(body, "\n")
	}
	t.Fatalf("README has no block marked runnable: %s", name)
	return ""
}

// curlStep is one replayed request and its answer.
type curlStep struct {
	Line   string
	Method string
	URL    *url.URL
	Status int
	Header http.Header
	Body   []byte
}

// curlReplay runs a block's lines in order. env holds variables; those in
// fixed keep their value whatever the block assigns.
type curlReplay struct {
	t      *testing.T
	env    map[string]string
	fixed  map[string]bool
	client *http.Client
	steps  []curlStep
}

var captureRE = regexp.MustCompile(`^\s*([A-Za-z_]\w*)=\$\((.*)\|\s*jq -r \.(\w+)\s*\)\s*(#.*)?$`)

var assignRE = regexp.MustCompile(`^[A-Za-z_]\w*$`)

func (c *curlReplay) run(block string) {
	c.t.Helper()
	var cont string
	for _, line := range strings.Split(block, "\n") {
		if strings.HasSuffix(strings.TrimRight(line, " "), "\\") {
			cont += strings.TrimSuffix(strings.TrimRight(line, " "), "\\") + " "
			continue
		}
		line = cont + line
		cont = ""
		if m := captureRE.FindStringSubmatch(line); m != nil {
			inner := c.words(m[2])
			st := c.curl(line, inner)
			c.set(m[1], jsonField(c.t, st.Body, m[3]))
			continue
		}
		words := c.words(line)
		if len(words) == 0 {
			continue
		}
		if words[0] == "curl" {
			c.curl(line, words)
			continue
		}
		for _, w := range words { // VAR=value …
			k, v, ok := strings.Cut(w, "=")
			if !ok || !assignRE.MatchString(k) {
				c.t.Fatalf("README line %q: only curl, VAR=value and VAR=$(curl … | jq -r .key) are replayed", line)
			}
			c.set(k, v)
		}
	}
}

func (c *curlReplay) set(k, v string) {
	if !c.fixed[k] {
		c.env[k] = v
	}
}

// words splits a line as the shell does, without its comment.
func (c *curlReplay) words(line string) (words []string) {
	var w strings.Builder
	in, quote := false, byte(0)
	flush := func() {
		if in {
			words = append(words, w.String())
		}
		w.Reset()
		in = false
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote == '\'':
			if ch == '\'' {
				quote = 0
			} else {
				w.WriteByte(ch)
			}
		case ch == '\'' || ch == '"':
			if quote == ch {
				quote = 0
			} else if quote == 0 {
				quote = ch
			} else {
				w.WriteByte(ch)
			}
			in = true
		case ch == '$' && i+1 < len(line) && line[i+1] == '(' && quote == 0:
			c.t.Fatalf("README line %q: $(…) is replayed only as VAR=$(curl … | jq -r .key)", line)
		case ch == '$':
			name, n := varName(line[i+1:])
			w.WriteString(c.env[name])
			i += n
			in = true
		case quote == 0 && ch == '#' && !in:
			return words
		case quote == 0 && (ch == ' ' || ch == '\t'):
			flush()
		default:
			w.WriteByte(ch)
			in = true
		}
	}
	flush()
	return words
}

func varName(s string) (string, int) {
	if strings.HasPrefix(s, "{") {
		end := strings.IndexByte(s, '}')
		return s[1:end], end + 1
	}
	n := 0
	for n < len(s) && (s[n] == '_' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || s[n] >= '0' && s[n] <= '9') {
		n++
	}
	return s[:n], n
}

// curl sends one curl command line's request and records it.
func (c *curlReplay) curl(line string, args []string) curlStep {
	c.t.Helper()
	method, target, get := "", "", false
	var data []string
	hdr := http.Header{}
	var user, pass string
	basic := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		next := func() string {
			i++
			if i >= len(args) {
				c.t.Fatalf("README line %q: %s needs a value", line, a)
			}
			return args[i]
		}
		switch a {
		case "-s", "-S", "-k", "-f", "--fail", "--silent":
		case "-X", "--request":
			method = next()
		case "-H", "--header":
			k, v, _ := strings.Cut(next(), ":")
			hdr.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		case "-d", "--data", "--data-raw":
			data = append(data, next())
		case "--data-urlencode":
			k, v, _ := strings.Cut(next(), "=")
			data = append(data, k+"="+url.QueryEscape(v))
		case "-u", "--user":
			user, pass, _ = strings.Cut(next(), ":")
			basic = true
		case "-G", "--get":
			get = true
		default:
			if strings.HasPrefix(a, "-") {
				c.t.Fatalf("README line %q: curl option %s is not replayed", line, a)
			}
			target = a
		}
	}
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		c.t.Fatalf("README line %q: URL %q: %v", line, target, err)
	}
	var body io.Reader
	switch {
	case get && len(data) > 0:
		u.RawQuery = strings.Trim(u.RawQuery+"&"+strings.Join(data, "&"), "&")
	case len(data) > 0:
		body = strings.NewReader(strings.Join(data, "&"))
		if method == "" {
			method = "POST"
		}
		hdr.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if method == "" {
		method = "GET"
	}
	req, err := http.NewRequest(method, u.String(), body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header = hdr
	if basic {
		req.SetBasicAuth(user, pass)
	}
	res, err := c.client.Do(req)
	if err != nil {
		c.t.Fatalf("README line %q: %v", line, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	st := curlStep{Line: line, Method: method, URL: u, Status: res.StatusCode, Header: res.Header, Body: b}
	c.steps = append(c.steps, st)
	if res.StatusCode >= 300 {
		c.t.Fatalf("README line %q: %s %s answered %d: %s", line, method, u, res.StatusCode, b)
	}
	return st
}

// jsonField is jq -r .key of a JSON answer.
func jsonField(t *testing.T, body []byte, key string) string {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("jq -r .%s of %q: %v", key, body, err)
	}
	v, ok := m[key]
	if !ok {
		t.Fatalf("jq -r .%s: no such key in %s", key, body)
	}
	return fmt.Sprint(v)
}
