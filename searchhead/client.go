package searchhead

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/query"
)

// Client posts searches to a search head's POST /v1/search (SPEC §7), or to
// a peer's, which takes the same body; the CLI, devcluster and the
// integration tests use it rather than each writing the request.
type Client struct {
	URL   string       // base URL, e.g. http://127.0.0.1:8089 (no trailing /)
	Token string       // bearer token; "" for none
	HTTP  *http.Client // nil: http.DefaultClient
	// Role, when set, is the role a search's answer must name in
	// api.RoleHeader: an answer naming another is refused with a
	// *RoleError before its body is read (a peer's /v1/search searches
	// only its own copies: taken for a search head's answer, it would pass
	// part of the data off as all of it). An answer naming none is taken.
	Role string
}

// RoleError is an answer from a process of another role than Client.Role.
type RoleError struct {
	URL  string // the client's URL
	Got  string // the role the answer named
	Want string // Client.Role
}

func (e *RoleError) Error() string {
	return fmt.Sprintf("%s is a %s, not a %s", e.URL, e.Got, e.Want)
}

// StreamError is a streamed search that failed after its answer began:
// the head's error line.
type StreamError struct {
	Msg  string
	Code string
}

func (e *StreamError) Error() string { return e.Msg }

// Answer is one search's answer: the HTTP status and, for 200, the
// response; otherwise the error the body carried (the body itself when it
// carried none).
type Answer struct {
	Status  int
	Resp    query.Response
	Error   string        `json:"error"`
	Code    string        `json:"code"`
	Elapsed time.Duration // from sending the request to reading the answer
	// RawError: the refused answer's body carried no JSON error (not JSON,
	// or no "error"): Error is the body itself.
	RawError bool `json:"-"`
	// Body is the body as read, by Post only.
	Body []byte `json:"-"`
}

// maxRefusalBytes bounds what Search and Stream read of a refused
// search's body.
const maxRefusalBytes = 1 << 20

// Search posts req (a query.Request or any body of the same JSON shape)
// and decodes the answer as it comes; numbers in the rows stay
// json.Number. The error is the transport's, a *RoleError, or "bad
// answer: …" when the answer does not decode: a refused search is an
// Answer (at most 1 MiB of its body read).
func (c Client) Search(ctx context.Context, req any) (Answer, error) {
	start := time.Now()
	res, a, err := c.open(ctx, "/v1/search", req)
	if res == nil {
		return a, err
	}
	defer res.Body.Close()
	d := json.NewDecoder(res.Body)
	d.UseNumber()
	if err := d.Decode(&a.Resp); err != nil {
		return a, fmt.Errorf("bad answer: %w", err)
	}
	a.Elapsed = time.Since(start)
	return a, nil
}

// Post posts req like Search and reads the whole answer, refused or not,
// without decoding it: Answer.Body is the body as read (a caller that
// prints the answer's JSON as it came). A failed read is "read answer: …".
func (c Client) Post(ctx context.Context, req any) (Answer, error) {
	start := time.Now()
	res, err := c.post(ctx, "/v1/search", req)
	if err != nil {
		return Answer{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return Answer{}, fmt.Errorf("read answer: %w", err)
	}
	a := Answer{Status: res.StatusCode, Elapsed: time.Since(start), Body: raw}
	if res.StatusCode != http.StatusOK {
		a.refused(raw)
	}
	return a, nil
}

// Stream posts req with ?stream=true and reads the NDJSON answer as it
// comes (SPEC §7): each result row goes to row as it arrives (numbers stay
// json.Number), and the summary line ends the answer: Answer.Resp holds
// the summary and, for a streamed | table or | fields, the columns (the
// rows went to row only). An error line is a *StreamError; a line that
// does not decode is "bad answer: …"; an answer that ends without a
// summary is an error too. A refused search is an Answer (at most 1 MiB of
// its body read).
func (c Client) Stream(ctx context.Context, req any, row func(map[string]any)) (Answer, error) {
	start := time.Now()
	res, a, err := c.open(ctx, "/v1/search?stream=true", req)
	if res == nil {
		return a, err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	dec.UseNumber()
	var sum *query.Summary
	for {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return a, fmt.Errorf("bad answer: %w", err)
		}
		if e, ok := line["error"].(string); ok && len(line) <= 2 {
			code, _ := line["code"].(string)
			return a, &StreamError{Msg: e, Code: code}
		}
		if s, ok := line["summary"]; ok && len(line) <= 2 {
			b, _ := json.Marshal(s)
			sum = &query.Summary{}
			_ = json.Unmarshal(b, sum)
			if f, ok := line["fields"].([]any); ok {
				for _, x := range f {
					a.Resp.Fields = append(a.Resp.Fields, fmt.Sprint(x))
				}
			}
			continue
		}
		row(line)
	}
	if sum == nil {
		return a, errors.New("the answer ended without a summary")
	}
	a.Resp.Summary, a.Elapsed = *sum, time.Since(start)
	return a, nil
}

// Site is the site the search head serves, as its /healthz names it (""
// when the answer names none). Only the transport's error is returned.
func (c Client) Site(ctx context.Context) (string, error) {
	res, err := c.send(ctx, http.MethodGet, "/healthz", nil)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var hz struct {
		Site string `json:"site"`
	}
	_ = json.NewDecoder(res.Body).Decode(&hz)
	return hz.Site, nil
}

// open posts req to path for Search and Stream: an accepted search's
// answer is returned unread, a refused one's read (at most
// maxRefusalBytes) into the Answer, with no response.
func (c Client) open(ctx context.Context, path string, req any) (*http.Response, Answer, error) {
	start := time.Now()
	res, err := c.post(ctx, path, req)
	if err != nil {
		return nil, Answer{}, err
	}
	a := Answer{Status: res.StatusCode}
	if res.StatusCode != http.StatusOK {
		defer res.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(res.Body, maxRefusalBytes))
		a.refused(raw)
		a.Elapsed = time.Since(start)
		return nil, a, nil
	}
	return res, a, nil
}

// refused takes a refused search's body: its JSON error and code, or the
// body itself.
func (a *Answer) refused(raw []byte) {
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		a.Error, a.Code = e.Error, e.Code
		return
	}
	a.Error, a.RawError = string(raw), true
}

// post posts a search body to path and checks the answer's role.
func (c Client) post(ctx context.Context, path string, req any) (*http.Response, error) {
	b, _ := json.Marshal(req)
	res, err := c.send(ctx, http.MethodPost, path, b)
	if err != nil {
		return nil, err
	}
	if got := res.Header.Get(api.RoleHeader); c.Role != "" && got != "" && got != c.Role {
		res.Body.Close()
		return nil, &RoleError{URL: c.URL, Got: got, Want: c.Role}
	}
	return res, nil
}

// send sends one request with the client's token.
func (c Client) send(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	hr, err := http.NewRequestWithContext(ctx, method, c.URL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(hr)
}
