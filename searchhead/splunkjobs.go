package searchhead

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/query"
)

// Search jobs of Splunk's REST API (POST /services/search/jobs): a job runs
// one search through the head's own search path (Head.search) in the
// background, owned by the token that created it, and holds its results in
// memory until it is deleted, cancelled or expires. Every cost is bounded:
// jobs per token and in all (held in any state), result bytes per job, in
// all and per token, jobs running at once (half the head's search slots,
// so jobs never starve POST /v1/search), and how long a job is kept.

// Defaults of JobLimits.
const (
	DefaultJobTTL          = 10 * time.Minute // Splunk's dispatch ttl of an ad hoc search
	DefaultMaxJobsPerToken = 20
	DefaultMaxJobs         = 100
	DefaultJobMaxBytes     = 16 << 20
	DefaultJobsMaxBytes    = 256 << 20
	// maxJobMessages bounds the messages a job keeps (a partial search has
	// one warning per bucket it lacks).
	maxJobMessages = 50
)

// JobLimits bound the search jobs of one head. A zero field takes its
// default.
type JobLimits struct {
	// TTL: a finished job is kept this long after it finished or was last
	// read, then cancelled and freed (Splunk's ttl).
	TTL time.Duration
	// PerToken and Total: jobs held at once (queued, running or done) by
	// one token (429 past it) and by the head (503 past it).
	PerToken, Total int
	// JobBytes and TotalBytes: result bytes one job holds, and all jobs
	// together; one token's jobs hold at most half of TotalBytes. A job
	// that would pass a bound stops its search and keeps what it has,
	// saying so in its messages; a new job while TotalBytes is used up
	// gets 503.
	JobBytes, TotalBytes int64
}

func (l JobLimits) withDefaults() JobLimits {
	if l.TTL <= 0 {
		l.TTL = DefaultJobTTL
	}
	if l.PerToken <= 0 {
		l.PerToken = DefaultMaxJobsPerToken
	}
	if l.Total <= 0 {
		l.Total = DefaultMaxJobs
	}
	if l.JobBytes <= 0 {
		l.JobBytes = DefaultJobMaxBytes
	}
	if l.TotalBytes <= 0 {
		l.TotalBytes = DefaultJobsMaxBytes
	}
	return l
}

// Dispatch states of a job (Splunk's dispatchState).
const (
	stateQueued  = "QUEUED"
	stateRunning = "RUNNING"
	stateDone    = "DONE"
	stateFailed  = "FAILED"
)

// emitFunc receives a search's result rows as they are released.
type emitFunc = func(rows []map[string]any, fields []string) error

// searchFunc runs a job's search: Head.search with a queuedSearch (tests
// pass a fake).
type searchFunc func(ctx context.Context, req Request, indexes []string, emit emitFunc, started func()) (*query.Response, error)

// splunkMsg is one message of a job or a results answer, as Splunk writes
// them: {"type": "WARN", "text": "…"}.
type splunkMsg struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// job is one search job.
type job struct {
	sid, owner, author string
	search             string // as posted, with its leading "search "
	req                Request
	events             bool // its results are events (eventSearch)
	indexes            []string
	created            time.Time
	cancel             context.CancelFunc
	done               chan struct{} // closed when the search ended

	// guarded by the store's mutex
	lastUsed time.Time
	timer    *time.Timer
	removed  bool

	mu       sync.Mutex
	state    string
	rows     []map[string]any
	columns  []string // the answer's columns when they are not events
	bytes    int64
	cut      string // why the results stop short ("" if they do not)
	messages []splunkMsg
	summary  *query.Summary
	started  time.Time
	finished time.Time
}

// jobView is a consistent copy of a job's state for one answer.
type jobView struct {
	sid, author, search, state string
	req                        Request
	isEvents                   bool
	created, started, finished time.Time
	rows                       []map[string]any // shared, never changed after DONE
	columns                    []string
	messages                   []splunkMsg
	summary                    *query.Summary
	ttlLeft                    time.Duration
}

// events reports whether the job's results are events (eventSearch).
func (v jobView) events() bool { return v.isEvents }

// jobStore holds one head's jobs.
type jobStore struct {
	head   string
	lim    JobLimits
	run    searchFunc
	log    *slog.Logger
	slots  chan struct{} // jobs whose search runs at once
	onDrop func(reason string)

	mu         sync.Mutex
	jobs       map[string]*job
	perOwner   map[string]int
	ownerBytes map[string]int64
	bytes      int64
	closed     bool
	wg         sync.WaitGroup
}

func newJobStore(head string, lim JobLimits, slots int, run searchFunc, log *slog.Logger) *jobStore {
	return &jobStore{head: head, lim: lim.withDefaults(), run: run, log: log, slots: make(chan struct{}, max(1, slots)),
		jobs: map[string]*job{}, perOwner: map[string]int{}, ownerBytes: map[string]int64{}, onDrop: func(string) {}}
}

// errJobFull stops a job's search when its results reach a byte bound.
var errJobFull = errors.New("job results full")

// create starts a job for c unless a bound refuses it.
func (s *jobStore) create(c caller, search string, req Request, events bool) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	retry := fmt.Sprintf("DELETE finished jobs, or wait for their ttl (%s) to free them", s.lim.TTL)
	switch {
	case s.closed:
		return nil, &RequestError{Status: 503, Code: "shutting_down", Msg: "the search head is shutting down"}
	case s.perOwner[c.owner] >= s.lim.PerToken:
		s.onDrop("per_token")
		return nil, &RequestError{Status: 429, Code: "too_many_jobs",
			Msg: fmt.Sprintf("this token already holds %d search jobs on search head %s (limit %d, --splunk-max-jobs-per-token): %s", s.perOwner[c.owner], s.head, s.lim.PerToken, retry)}
	case len(s.jobs) >= s.lim.Total:
		s.onDrop("total")
		return nil, &RequestError{Status: 503, Code: "too_many_jobs",
			Msg: fmt.Sprintf("search head %s holds %d search jobs (limit %d, --splunk-max-jobs): retry later", s.head, len(s.jobs), s.lim.Total)}
	case s.bytes >= s.lim.TotalBytes:
		s.onDrop("memory")
		return nil, &RequestError{Status: 503, Code: "jobs_memory_full",
			Msg: fmt.Sprintf("search jobs on search head %s hold %d bytes of results (limit %d, --splunk-jobs-max-bytes): retry later", s.head, s.bytes, s.lim.TotalBytes)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	now := time.Now()
	j := &job{sid: s.newSID(now), owner: c.owner, author: c.label, search: search, req: req, events: events, indexes: c.indexes,
		created: now, cancel: cancel, done: make(chan struct{}), lastUsed: now, state: stateQueued}
	s.jobs[j.sid] = j
	s.perOwner[c.owner]++
	s.wg.Add(1)
	go s.execute(ctx, j)
	return j, nil
}

// newSID names a job: the head, the time and 64 random bits, so a sid can
// be neither guessed nor mistaken for another head's. Called with s.mu.
func (s *jobStore) newSID(now time.Time) string {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		sid := s.head + "_" + strconv.FormatInt(now.Unix(), 10) + "." + hex.EncodeToString(b[:])
		if _, taken := s.jobs[sid]; !taken {
			return sid
		}
	}
}

// execute runs a job's search: QUEUED until a job slot and a head slot
// are free, RUNNING, then DONE or FAILED; its ttl starts at the end.
func (s *jobStore) execute(ctx context.Context, j *job) {
	defer s.wg.Done()
	defer close(j.done)
	var resp *query.Response
	var err error
	select {
	case s.slots <- struct{}{}:
		resp, err = s.run(ctx, j.req, j.indexes, func(rows []map[string]any, fields []string) error {
			return s.keep(j, rows, fields)
		}, func() {
			j.mu.Lock()
			j.state, j.started = stateRunning, time.Now()
			j.mu.Unlock()
		})
		<-s.slots
	case <-ctx.Done():
		err = ctx.Err()
	}
	j.finish(resp, err, s.lim)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !j.removed {
		j.lastUsed = time.Now()
		j.timer = time.AfterFunc(s.lim.TTL, func() { s.expire(j) })
	}
}

// keep holds a batch of a job's rows within its byte bounds. Past one it
// keeps what fits, records why, and stops the search (errJobFull).
func (s *jobStore) keep(j *job, rows []map[string]any, fields []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	var n int64
	fit := 0
	for _, r := range rows {
		b := rowBytes(r)
		switch {
		case j.bytes+n+b > s.lim.JobBytes:
			j.cut = fmt.Sprintf("this job's results reached %d bytes (--splunk-job-max-bytes)", s.lim.JobBytes)
		case s.bytes+n+b > s.lim.TotalBytes:
			j.cut = fmt.Sprintf("the search head's jobs hold %d bytes of results (--splunk-jobs-max-bytes)", s.lim.TotalBytes)
		case s.ownerBytes[j.owner]+n+b > s.lim.TotalBytes/2:
			j.cut = fmt.Sprintf("this token's jobs hold half of --splunk-jobs-max-bytes (%d bytes)", s.lim.TotalBytes/2)
		default:
			n += b
			fit++
			continue
		}
		break
	}
	if j.removed { // deleted or expired meanwhile: nothing more is held
		return errJobFull
	}
	s.bytes += n
	s.ownerBytes[j.owner] += n
	j.bytes += n
	j.rows = append(j.rows, rows[:fit]...)
	if !j.events && len(fields) > 0 {
		j.columns = fields
	}
	if j.cut != "" {
		return errJobFull
	}
	return nil
}

// finish records how a job's search ended and its messages: the
// summary's warnings (a partial search says which buckets it lacks), a
// cut, or the error of a failed search.
func (j *job) finish(resp *query.Response, err error, lim JobLimits) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.finished = time.Now()
	var msgs []splunkMsg
	switch {
	case j.cut != "" && errors.Is(err, errJobFull):
		j.state = stateDone
		msgs = append(msgs, splunkMsg{"WARN", fmt.Sprintf("results truncated to their first %d rows: %s; the search was stopped, so whether it was complete is not known", len(j.rows), j.cut)})
	case err != nil:
		j.state = stateFailed
		j.rows = nil
		msgs = append(msgs, splunkMsg{"ERROR", err.Error()})
	default:
		j.state = stateDone
		sum := resp.Summary
		j.summary = &sum
		if !j.events && len(resp.Fields) > 0 {
			j.columns = resp.Fields
		}
		msgs = summaryMessages(sum)
	}
	if len(msgs) > maxJobMessages {
		more := len(msgs) - maxJobMessages + 1
		msgs = append(msgs[:maxJobMessages-1], splunkMsg{"WARN", fmt.Sprintf("… and %d more messages", more)})
	}
	j.messages = msgs
}

// summaryMessages turns a search summary into Splunk messages: a partial
// search first says so (SPEC §5: never a silent short answer), then every
// warning of the summary.
func summaryMessages(sum query.Summary) []splunkMsg {
	var msgs []splunkMsg
	if sum.Partial {
		b := sum.Buckets
		msgs = append(msgs, splunkMsg{"WARN", fmt.Sprintf("partial results: %d of %d buckets were not searched (%d failed, %d missing)",
			b.Failed+b.Missing, b.Total, b.Failed, b.Missing)})
	}
	for _, w := range sum.Warnings {
		msgs = append(msgs, splunkMsg{"WARN", w})
	}
	return msgs
}

// get returns c's job sid and marks it read (its ttl starts again). A job
// of another token is answered as unknown: 404 either way.
func (s *jobStore) get(c caller, sid string) (*job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[sid]
	if j == nil || j.owner != c.owner {
		return nil, s.unknown(sid)
	}
	j.lastUsed = time.Now()
	return j, nil
}

func (s *jobStore) unknown(sid string) error {
	msg := fmt.Sprintf("unknown sid %q: no such search job of this token on search head %s (a job lives on the head that ran it until it is deleted or its ttl ends)", sid, s.head)
	if head, _, ok := cutSIDHead(sid); ok && head != s.head {
		msg = fmt.Sprintf("unknown sid %q: it was created on search head %s; jobs live in the memory of the head that ran them", sid, head)
	}
	return &RequestError{Status: 404, Code: "unknown_sid", Msg: msg}
}

// cutSIDHead splits a sid into the head that made it and the rest.
func cutSIDHead(sid string) (head, rest string, ok bool) {
	i := len(sid) - 1
	for i >= 0 && sid[i] != '_' {
		i--
	}
	if i <= 0 {
		return "", "", false
	}
	return sid[:i], sid[i+1:], true
}

// list returns c's jobs, oldest first.
func (s *jobStore) list(c caller) []*job {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*job
	for _, j := range s.jobs {
		if j.owner == c.owner {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].created.Before(out[b].created) })
	return out
}

// remove deletes c's job sid: its search is cancelled and its memory freed.
func (s *jobStore) remove(c caller, sid string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[sid]
	if j == nil || j.owner != c.owner {
		return s.unknown(sid)
	}
	s.drop(j)
	return nil
}

// drop removes a job; called with s.mu.
func (s *jobStore) drop(j *job) {
	if j.removed {
		return
	}
	j.removed = true
	j.cancel()
	if j.timer != nil {
		j.timer.Stop()
	}
	delete(s.jobs, j.sid)
	if s.perOwner[j.owner]--; s.perOwner[j.owner] <= 0 {
		delete(s.perOwner, j.owner)
	}
	j.mu.Lock()
	n := j.bytes
	j.mu.Unlock()
	s.bytes -= n
	if s.ownerBytes[j.owner] -= n; s.ownerBytes[j.owner] <= 0 {
		delete(s.ownerBytes, j.owner)
	}
}

// expire drops a finished job whose ttl has run since it was last read,
// or re-arms its timer for the rest.
func (s *jobStore) expire(j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.removed {
		return
	}
	if left := s.lim.TTL - time.Since(j.lastUsed); left > 0 {
		j.timer = time.AfterFunc(left, func() { s.expire(j) })
		return
	}
	s.log.Debug("search job expired", "sid", j.sid)
	s.drop(j)
}

// view copies a job's state for an answer.
func (s *jobStore) view(j *job) jobView {
	s.mu.Lock()
	left := s.lim.TTL
	if !j.finishedAt().IsZero() {
		left = max(0, s.lim.TTL-time.Since(j.lastUsed))
	}
	s.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	return jobView{sid: j.sid, author: j.author, search: j.search, state: j.state, req: j.req, isEvents: j.events,
		created: j.created, started: j.started, finished: j.finished, rows: j.rows, columns: j.columns,
		messages: j.messages, summary: j.summary, ttlLeft: left}
}

func (j *job) finishedAt() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.finished
}

// held reports the jobs and result bytes held (metrics).
func (s *jobStore) held() (jobs int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.jobs), s.bytes
}

// close cancels every job and waits for their searches to end.
func (s *jobStore) close() {
	s.mu.Lock()
	s.closed = true
	for _, j := range s.jobs {
		s.drop(j)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// rowBytes estimates what a result row holds in memory: its keys and
// values plus the map's own overhead.
func rowBytes(row map[string]any) int64 {
	n := int64(64)
	for k, v := range row {
		n += int64(len(k)) + 16 + valueBytes(v)
	}
	return n
}

func valueBytes(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x)) + 16
	case []any:
		n := int64(24)
		for _, e := range x {
			n += valueBytes(e)
		}
		return n
	default:
		return 16
	}
}
