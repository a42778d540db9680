package searchhead

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/quarry-dev/quarry/query"
)

// Client posts searches to a search head's POST /v1/search (SPEC §7), or to
// a peer's, which takes the same body; devcluster and the integration tests
// use it rather than each writing the request.
type Client struct {
	URL   string       // base URL, e.g. http://127.0.0.1:8089 (no trailing /)
	Token string       // bearer token; "" for none
	HTTP  *http.Client // nil: http.DefaultClient
}

// Answer is one search's answer: the HTTP status and, for 200, the
// response; otherwise the error the body carried (the body itself when it
// carried none).
type Answer struct {
	Status  int
	Resp    query.Response
	Error   string        `json:"error"`
	Code    string        `json:"code"`
	Elapsed time.Duration // from sending the request to reading the answer
}

// Search posts req (a query.Request or any body of the same JSON shape)
// and reads the whole answer; numbers in the rows stay json.Number. The
// error is the transport's or the decoder's: a refused search is an Answer.
func (c Client) Search(ctx context.Context, req any) (Answer, error) {
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/v1/search", bytes.NewReader(b))
	if err != nil {
		return Answer{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	start := time.Now()
	res, err := hc.Do(hr)
	if err != nil {
		return Answer{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{Status: res.StatusCode, Elapsed: time.Since(start)}
	if res.StatusCode != http.StatusOK {
		_ = json.Unmarshal(raw, &a)
		if a.Error == "" {
			a.Error = string(raw)
		}
		return a, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&a.Resp); err != nil {
		return a, fmt.Errorf("decode search answer: %w: %s", err, raw)
	}
	return a, nil
}
