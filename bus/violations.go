package bus

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrPermissionDenied means the server refused to let this connection
// publish on the subject (its user's role may not; SPEC §11). A Request on
// a connection made by Connect fails with it as soon as the server says so,
// instead of waiting for its deadline.
var ErrPermissionDenied = errors.New("permission denied")

// violationWatch lets in-flight requests of one connection learn about the
// server's asynchronous permissions violations for their subjects.
type violationWatch struct {
	mu      sync.Mutex
	next    int
	waiters map[string]map[int]func(error)
}

// watches maps the connections Connect made to their watch.
var watches sync.Map // *nats.Conn → *violationWatch

func newViolationWatch() *violationWatch {
	return &violationWatch{waiters: map[string]map[int]func(error){}}
}

// watch calls fn if a publish violation on subject is reported, until the
// returned stop is called.
func (w *violationWatch) watch(subject string, fn func(error)) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.next
	w.next++
	if w.waiters[subject] == nil {
		w.waiters[subject] = map[int]func(error){}
	}
	w.waiters[subject][id] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.waiters[subject], id)
		if len(w.waiters[subject]) == 0 {
			delete(w.waiters, subject)
		}
	}
}

// report routes an async error to the requests waiting on its subject.
func (w *violationWatch) report(err error) {
	subject, ok := violationSubject(err)
	if !ok {
		return
	}
	w.mu.Lock()
	fns := make([]func(error), 0, len(w.waiters[subject]))
	for _, fn := range w.waiters[subject] {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(fmt.Errorf("publish %s: %w (%w)", subject, ErrPermissionDenied, err))
	}
}

// violationSubject extracts the subject of a publish violation:
// `nats: permissions violation: Permissions Violation for Publish to "x"`.
func violationSubject(err error) (string, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	const marker = "for publish to "
	msg := err.Error()
	i := strings.Index(strings.ToLower(msg), marker)
	if i < 0 {
		return "", false
	}
	rest := strings.TrimSpace(msg[i+len(marker):])
	rest = strings.Trim(rest, `"'`)
	if j := strings.IndexAny(rest, `"' `); j >= 0 {
		rest = rest[:j]
	}
	return rest, rest != ""
}
