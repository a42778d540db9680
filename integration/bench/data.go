package main

// The data sets of the bench: the shared generator's output
// (../shared/bench/gen_events.go, seed 1, HEC envelopes) in the
// git-ignored data folder, the generator's summary beside each file
// (<file>.answers), and the answers the published queries must give.
//
// The 1M and 5M sets are the README's: their answers are the published
// ones (qbQueries' check) and their figures are compared with the
// baselines. The tiny set (20,000 events, the same generator and seed, so
// the same bytes everywhere) is what CI runs (`make bench-smoke`): the
// README publishes no answers for it, so they are computed here, before
// any part runs, by the oracle (querytest.Reference, a naive scan that
// shares no execution code with the engine) over the generated events,
// and cross-checked against the generator's own counts and a direct
// count of the events' fields. Its figures are printed, never targets.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/query/querytest"
)

// sizeEvents is every data set the bench knows, by its -sizes name.
var sizeEvents = map[string]int{"tiny": 20_000, "1m": 1_000_000, "5m": 5_000_000}

// hasTargets says whether a set's figures are compared with the baselines
// and the targets; the tiny set's are printed only.
func hasTargets(size string) bool { return size != "tiny" }

// tinyNote is printed wherever tiny-set figures appear.
const tinyNote = "tiny set (20,000 events): a check that every part runs and answers exactly; its figures are printed, not targets, and have no baseline"

// oracleAnswers holds, by size, the expected rows of every published query
// (by id) where the README publishes none: the tiny set. It is filled by
// ensureHEC before any search and only read afterwards.
var oracleAnswers = map[string]map[string][]map[string]any{}

// verify checks a response of q on a set: against the published answers on
// the 1M and 5M sets, row by row against the oracle's on the tiny one.
func (q qbQuery) verify(size string, r *query.Response) error {
	if want, ok := oracleAnswers[size]; ok {
		if d := qbDiff(r.Results, want[q.id]); d != "" {
			return errors.New(d)
		}
		return nil
	}
	return q.check(size, r)
}

// ensureHEC returns a set's HEC file and event count, generating the file
// and its summary when either is absent; for the tiny set it also
// computes the expected answers (oracleAnswers).
func ensureHEC(cfg Config, size string) (string, int, error) {
	n, ok := sizeEvents[size]
	if !ok {
		return "", 0, fmt.Errorf("unknown size %q (want tiny, 1m or 5m)", size)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return "", 0, err
	}
	file := filepath.Join(cfg.DataDir, "events-"+size+".hec")
	// The tiny set's answers need the generator's summary; a big set's
	// file is reused as it is (the query part once wrote none).
	if !nonEmpty(file) || size == "tiny" && !nonEmpty(file+".answers") {
		if err := generate(cfg, file, n); err != nil {
			return "", 0, err
		}
	}
	if size == "tiny" {
		if err := computeOracleAnswers(size, file, n); err != nil {
			return "", 0, fmt.Errorf("expected answers of the %s set: %w", size, err)
		}
	}
	return file, n, nil
}

func nonEmpty(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Size() > 0
}

// generate runs the shared generator (seed 1, HEC format) into file, its
// summary (stderr) into file.answers.
func generate(cfg Config, file string, n int) error {
	gen := filepath.Join(cfg.SharedDir, "gen_events.go")
	if _, err := os.Stat(gen); err != nil {
		return fmt.Errorf("the shared generator is missing (-shared names its folder): %w", err)
	}
	fmt.Fprintf(os.Stderr, "bench: generating %s (%d events, seed 1)\n", file, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	tmp := file + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "run", gen,
		"-n", strconv.Itoa(n), "-seed", "1", "-format", "hec", "-o", tmp)
	cmd.Stdout = os.Stderr
	ans, err := os.Create(file + ".answers.tmp")
	if err != nil {
		return err
	}
	cmd.Stderr = ans
	err = cmd.Run()
	ans.Close()
	if err != nil {
		b, _ := os.ReadFile(file + ".answers.tmp")
		return fmt.Errorf("generate %s: %w: %s", file, err, strings.TrimSpace(string(b)))
	}
	if err := os.Rename(tmp, file); err != nil {
		return err
	}
	return os.Rename(file+".answers.tmp", file+".answers")
}

// genSummary is what the generator prints on stderr.
type genSummary struct {
	events, s5xx, errorEvents, rare int
	s5xxByHost                      map[string]int64
}

func readSummary(path string) (genSummary, error) {
	s := genSummary{s5xxByHost: map[string]int64{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		byHost := strings.HasPrefix(line, "5xx_by_host:")
		for _, kv := range strings.Fields(strings.TrimPrefix(line, "5xx_by_host:")) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			x, err := strconv.Atoi(v)
			if err != nil {
				return s, fmt.Errorf("%s: %q: %w", path, kv, err)
			}
			if byHost {
				s.s5xxByHost[k] = int64(x)
				continue
			}
			seen++
			switch k {
			case "events":
				s.events = x
			case "5xx":
				s.s5xx = x
			case "error_word_events":
				s.errorEvents = x
			case "rare_events":
				s.rare = x
			default:
				seen--
			}
		}
	}
	if seen != 4 || len(s.s5xxByHost) != 50 {
		return s, fmt.Errorf("%s: not the generator's summary", path)
	}
	return s, nil
}

// directCounts are counted straight from the events' envelopes, without
// any search code: a second opinion on queries a and d.
type directCounts struct {
	events, hourFive int64 // every event; events in [05:00, 06:00)
	paths            map[string]int64
}

// computeOracleAnswers runs every published query through the oracle over
// the set's events, checks the oracle against the generator's summary and
// the direct counts, and records its rows as the set's answers.
func computeOracleAnswers(size, file string, n int) error {
	if _, done := oracleAnswers[size]; done {
		return nil
	}
	start := time.Now()
	refs := map[string]*querytest.Reference{}
	for _, q := range qbQueries {
		ref, err := querytest.NewReference(query.Request{Query: q.spl})
		if err != nil {
			return fmt.Errorf("query %s: %w", q.id, err)
		}
		refs[q.id] = ref
	}
	lo := time.Date(2026, 1, 1, 5, 0, 0, 0, time.UTC).UnixNano()
	hi := lo + int64(time.Hour)
	dc := directCounts{paths: map[string]int64{}}
	var ord uint32
	err := qbScanHEC(file, func(ev *query.Event) bool {
		ord++
		row := query.EventRow(ev, "oracle", ord, "oracle")
		for _, r := range refs {
			r.Add(row)
		}
		dc.events++
		if ev.Time >= lo && ev.Time < hi {
			dc.hourFive++
		}
		for _, f := range ev.Fields {
			if f.Name == "path" {
				dc.paths[f.Value]++
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	sum, err := readSummary(file + ".answers")
	if err != nil {
		return err
	}
	if sum.events != n || dc.events != int64(n) {
		return fmt.Errorf("%d events in %s, the generator says %d, want %d", dc.events, file, sum.events, n)
	}
	want := map[string][]map[string]any{}
	for id, r := range refs {
		want[id] = r.Results()
	}
	if err := crossCheck(want, sum, dc); err != nil {
		return fmt.Errorf("the oracle disagrees with the generator or the direct counts: %w", err)
	}
	oracleAnswers[size] = want
	sha, err := fileSHA256(file)
	if err != nil {
		return err
	}
	fmt.Printf("bench: %s (sha256 %s); expected answers (oracle over its %d events in %.1fs, cross-checked with the generator's summary and direct counts):\n   %s\n",
		file, sha, n, time.Since(start).Seconds(), describeAnswers(want))
	return nil
}

// crossCheck holds the oracle's answers of a–e to the generator's counts
// (b, c, e) and the direct counts (a, d).
func crossCheck(want map[string][]map[string]any, sum genSummary, dc directCounts) error {
	count := func(id string) (int64, error) {
		rows := want[id]
		if len(rows) != 1 {
			return 0, fmt.Errorf("query %s: %d rows, want 1", id, len(rows))
		}
		return qbInt(rows[0]["count"])
	}
	for _, c := range []struct {
		id   string
		want int64
	}{{"a", dc.hourFive}, {"b", int64(sum.errorEvents)}, {"e", int64(sum.rare)}} {
		got, err := count(c.id)
		if err != nil {
			return err
		}
		if got != c.want {
			return fmt.Errorf("query %s: oracle %d, want %d", c.id, got, c.want)
		}
	}
	byHost := map[string]int64{}
	for h, k := range sum.s5xxByHost {
		if k > 0 {
			byHost[h] = k
		}
	}
	if err := rowsMatch("c", want["c"], "host", byHost); err != nil {
		return err
	}
	// d: the 10 most frequent paths with their counts.
	type pc struct {
		path string
		n    int64
	}
	var all []pc
	for p, k := range dc.paths {
		all = append(all, pc{p, k})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
	top := map[string]int64{}
	for i := 0; i < 10 && i < len(all); i++ {
		top[all[i].path] = all[i].n
	}
	if len(all) > 10 && all[9].n == all[10].n {
		return fmt.Errorf("query d: the 10th and 11th paths tie at %d: pick another size", all[9].n)
	}
	return rowsMatch("d", want["d"], "path", top)
}

// rowsMatch checks that rows hold exactly the keys of want, each with its
// count.
func rowsMatch(id string, rows []map[string]any, key string, want map[string]int64) error {
	if len(rows) != len(want) {
		return fmt.Errorf("query %s: oracle %d rows, want %d", id, len(rows), len(want))
	}
	for _, row := range rows {
		k, _ := row[key].(string)
		got, err := qbInt(row["count"])
		if err != nil {
			return fmt.Errorf("query %s: %v", id, err)
		}
		if w, ok := want[k]; !ok || got != w {
			return fmt.Errorf("query %s: oracle %s=%q count %d, want %d", id, key, k, got, w)
		}
	}
	return nil
}

// describeAnswers is a one-line account of the expected answers of a–e.
func describeAnswers(want map[string][]map[string]any) string {
	var parts []string
	for _, q := range qbQueries {
		rows := want[q.id]
		switch {
		case len(rows) == 1 && rows[0]["count"] != nil && len(rows[0]) == 1:
			parts = append(parts, fmt.Sprintf("%s %v", q.id, rows[0]["count"]))
		case q.id == "d" && len(rows) > 0:
			parts = append(parts, fmt.Sprintf("d %d rows, %v %v … %v %v", len(rows), rows[0]["path"], rows[0]["count"],
				rows[len(rows)-1]["path"], rows[len(rows)-1]["count"]))
		default:
			var s int64
			for _, r := range rows {
				k, _ := qbInt(r["count"])
				s += k
			}
			parts = append(parts, fmt.Sprintf("%s %d rows, sum %d", q.id, len(rows), s))
		}
	}
	return strings.Join(parts, "; ")
}

// fileSHA256 is the hex SHA-256 of a file: the tiny set is the same bytes
// everywhere.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
