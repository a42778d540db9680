package manager

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
)

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestShortTokensWarnedNotRefused: a manager started with a short admin
// token and short seed HEC tokens starts (short tokens are not refused),
// warns once per kind, and never prints a secret nor the token key.
func TestShortTokensWarnedNotRefused(t *testing.T) {
	var buf lockedBuffer
	g := newGroup(t, 1, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.AdminToken = "T"
		c.Seed.HECTokens = []fsm.HECToken{{Token: "shorthec1", Ack: true}, {Token: "shorthec2", Ack: true}}
		c.Seed.SearchTokens = []fsm.SearchToken{{Token: "a-long-enough-search-token"}}
	})
	key := waitTokenKey(t, g.leader())
	// The leader logs the key's commit once its Apply returns.
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !strings.Contains(buf.String(), "cluster token key set") {
			return errors.New("no log line says the key was set")
		}
		return nil
	})
	out := buf.String()
	for kind, want := range map[string]int{"admin token": 1, "HEC token": 1, "search token": 0, "read token": 0} {
		if n := strings.Count(out, "a configured "+kind+" is shorter"); n != want {
			t.Errorf("%d warnings about a short %s, want %d:\n%s", n, kind, want, out)
		}
	}
	for _, s := range []string{"shorthec1", "shorthec2", "a-long-enough-search-token", "admin_token=T", fsm.TokenDigest("shorthec1")} {
		if strings.Contains(out, s) {
			t.Errorf("the log shows %q", s)
		}
	}
	for _, s := range []string{string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key)} {
		if strings.Contains(out, s) {
			t.Error("the log shows the token key")
		}
	}
}
