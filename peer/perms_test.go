package peer_test

import (
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer"
)

// TestDataIsClosedToOtherUsers (review L9): a peer's data folder — every
// event it holds — is closed to other local users: the folder it was given
// (even one an older build made 0755) loses others' bits at start, and
// every folder and file it writes (identity, hot journal, a warm bucket's
// files) is made without them.
func TestDataIsClosedToOtherUsers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := mustStartPeer(t, dir)
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.Addr()+"/services/collector/event",
		strings.NewReader(`{"event":"one"}{"event":"two"}`))
	req.Header.Set("Authorization", "Splunk T")
	req.Header.Set("X-Splunk-Request-Channel", "0C6A1E6B-1B0C-4C1A-9A0E-0D7B9B6D2F11")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("ingest: %v %v", res, err)
	}
	res.Body.Close()
	// Roll it warm, so the warm bucket's files are written too.
	testutil.WaitFor(t, 10*time.Second, func() error {
		var br peer.BucketsResponse
		getJSON(t, "http://"+p.Addr()+"/v1/buckets", &br)
		bs := br.Buckets
		for _, b := range bs {
			if b.State == "hot" {
				r, err := http.Post("http://"+p.Addr()+"/v1/buckets/"+b.ID+"/roll", "application/json", nil)
				if err == nil {
					r.Body.Close()
				}
			}
		}
		if len(bs) == 0 || bs[0].State != "warm" {
			return os.ErrNotExist
		}
		return nil
	})
	p.Close()
	n := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o007 != 0 {
			t.Errorf("%s is %v: other users may reach it", path, fi.Mode().Perm())
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Fatalf("walked only %d paths: nothing was written?", n)
	}
}
