// Package sampledata generates the sample events of `quarry dev` and of the
// docker-compose demo: web-access-like log lines from the bench event model
// (../shared/bench/gen_events.go), written as HEC envelopes. It keeps that
// generator's draw order, so for a given (n, seed, base) the events are the
// same as `go run gen_events.go -format hec` writes (with "index" set to the
// index asked for), and the counts it returns are the exact answers of the
// queries the dev cluster suggests.
package sampledata

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Counts are the exact answers over a generated set.
type Counts struct {
	Events    int // every event
	Status5xx int // status>=500
	Errors    int // events holding the word "error"
	Rare      int // events holding trace_id=zqxjkcanary
}

type rng struct{ s uint64 }

// next is splitmix64, as in gen_events.go.
func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *rng) float() float64 { return float64(r.next()>>11) / float64(1<<53) }

var statusTable = []struct{ code, weight int }{
	{200, 7600}, {201, 300}, {204, 200}, {301, 150}, {302, 250}, {304, 500},
	{400, 150}, {401, 100}, {403, 100}, {404, 400}, {429, 50},
	{500, 80}, {502, 50}, {503, 50}, {504, 20},
}

var paths = []string{
	"/", "/index.html", "/api/v1/products", "/static/js/app.js", "/static/css/main.css",
	"/api/v1/search", "/api/v1/cart", "/login", "/favicon.ico", "/api/v1/users/{id}",
	"/static/img/logo.png", "/api/v1/orders", "/api/v1/products/{id}", "/checkout",
	"/account", "/api/v1/orders/{id}", "/health", "/metrics", "/api/v2/recommendations",
	"/api/v1/inventory", "/logout", "/signup", "/api/v1/payments", "/api/v1/reviews/{id}",
	"/blog", "/blog/{id}", "/docs", "/docs/getting-started", "/api/v1/sessions",
	"/robots.txt", "/sitemap.xml", "/static/fonts/inter.woff2", "/api/v1/notifications",
	"/api/v1/users/{id}/settings", "/admin", "/admin/reports", "/api/internal/sync",
	"/downloads/{id}", "/support", "/contact",
}

var userAgents = []string{
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
	"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
	"Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
	"Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
	"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Mobile Safari/537.36",
	"curl/8.5.0",
	"Wget/1.21.4",
	"python-requests/2.31.0",
	"Go-http-client/1.1",
	"Googlebot/2.1 (+http://www.google.com/bot.html)",
	"Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
	"kube-probe/1.29",
}

var methods = []struct {
	name string
	cum  int
}{{"GET", 70}, {"POST", 90}, {"PUT", 94}, {"DELETE", 97}, {"HEAD", 99}, {"PATCH", 100}}

var upstreamReasons = []string{"connection refused", "timed out", "connection reset by peer", "no live upstreams"}

func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"')
}

// Write writes n events as HEC envelopes, one per line, into index, spread
// over the 24 hours from base, and returns their counts.
func Write(w io.Writer, n int, seed uint64, base time.Time, index string) (Counts, error) {
	if n <= 0 {
		return Counts{}, fmt.Errorf("sample data: %d events: want at least 1", n)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	r := &rng{s: seed}
	var c Counts
	buf := make([]byte, 0, 1024)
	for i := 0; i < n; i++ {
		buf = appendEvent(buf[:0], r, i, n, base.UTC(), index, &c)
		if _, err := bw.Write(buf); err != nil {
			return c, err
		}
	}
	return c, bw.Flush()
}

// appendEvent keeps gen_events.go's genEvent draw order: jitter, host,
// status, method, path, id, bytes, user agent, ip ×3, rt, note, reason.
func appendEvent(b []byte, r *rng, i, n int, base time.Time, index string, c *Counts) []byte {
	jitter := r.intn(1000)
	hostIdx := r.intn(50)
	sr := r.intn(10000)
	mr := r.intn(100)
	pu := r.float()
	id := r.intn(100000)
	bu := r.float()
	ua := r.intn(len(userAgents))
	ip1, ip2, ip3 := r.intn(256), r.intn(256), 1+r.intn(254)
	rtRaw := r.intn(2000)
	note := r.intn(200)
	reason := r.intn(len(upstreamReasons))

	ts := base.Add(time.Duration(int64(i)*86_399_000/int64(n)+int64(jitter)) * time.Millisecond)
	host := fmt.Sprintf("web-%02d", hostIdx)
	var source, sourcetype string
	switch hostIdx % 5 {
	case 0:
		source, sourcetype = "/var/log/haproxy.log", "haproxy:http"
	case 1, 2:
		source, sourcetype = "/var/log/nginx/access.log", "nginx:access"
	default:
		source, sourcetype = "/var/log/apache2/access.log", "access_combined"
	}
	status, acc := 0, 0
	for _, w := range statusTable {
		acc += w.weight
		if sr < acc {
			status = w.code
			break
		}
	}
	method := ""
	for _, m := range methods {
		if mr < m.cum {
			method = m.name
			break
		}
	}
	path := strings.Replace(paths[int(float64(len(paths))*pu*pu*pu)], "{id}", strconv.Itoa(id), 1)
	bytes := 100 + int(bu*bu*bu*200000)
	if status == 204 || status == 304 {
		bytes = 0
	}
	rt := rtRaw % 300
	if status >= 500 {
		rt = rtRaw
	}
	clientip := fmt.Sprintf("10.%d.%d.%d", ip1, ip2, ip3)

	msg := make([]byte, 0, 256)
	msg = append(msg, clientip...)
	msg = append(msg, " - - ["...)
	msg = ts.AppendFormat(msg, "02/Jan/2006:15:04:05 -0700")
	msg = append(msg, "] \""...)
	msg = append(msg, method...)
	msg = append(msg, ' ')
	msg = append(msg, path...)
	msg = append(msg, " HTTP/1.1\" "...)
	msg = strconv.AppendInt(msg, int64(status), 10)
	msg = append(msg, ' ')
	msg = strconv.AppendInt(msg, int64(bytes), 10)
	msg = append(msg, " \"-\" \""...)
	msg = append(msg, userAgents[ua]...)
	msg = append(msg, "\" rt="...)
	msg = strconv.AppendInt(msg, int64(rt), 10)
	msg = append(msg, "ms"...)
	switch {
	case status >= 500:
		msg = append(msg, " msg=\"upstream error: "...)
		msg = append(msg, upstreamReasons[reason]...)
		msg = append(msg, '"')
		c.Status5xx++
		c.Errors++
	case note == 0:
		msg = append(msg, " msg=\"recovered error: retry succeeded\""...)
		c.Errors++
	}
	if n >= 20 && i%(n/10) == n/20 {
		msg = append(msg, " trace_id=zqxjkcanary"...)
		c.Rare++
	}
	c.Events++

	b = append(b, `{"time":`...)
	ms := ts.UnixMilli()
	b = strconv.AppendInt(b, ms/1000, 10)
	b = append(b, '.')
	frac := ms % 1000
	b = append(b, byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	b = append(b, `,"host":"`...)
	b = append(b, host...)
	b = append(b, `","source":"`...)
	b = append(b, source...)
	b = append(b, `","sourcetype":"`...)
	b = append(b, sourcetype...)
	b = append(b, `","index":`...)
	b = appendJSONString(b, index)
	b = append(b, `,"event":`...)
	b = appendJSONString(b, string(msg))
	b = append(b, `,"fields":{"clientip":"`...)
	b = append(b, clientip...)
	b = append(b, `","method":"`...)
	b = append(b, method...)
	b = append(b, `","path":`...)
	b = appendJSONString(b, path)
	b = append(b, `,"status":"`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `","bytes":"`...)
	b = strconv.AppendInt(b, int64(bytes), 10)
	b = append(b, `","user_agent":`...)
	b = appendJSONString(b, userAgents[ua])
	b = append(b, "}}\n"...)
	return b
}
