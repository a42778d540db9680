package bus

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
)

// startExternalNATS runs the system's nats-server (Debian's package) on a
// random loopback port with the given config file, or skips the test.
func startExternalNATS(t *testing.T, conf []byte) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("no nats-server binary (apt-get install nats-server) — external mode untested here")
	}
	args := []string{"-a", "127.0.0.1", "-p", "-1", "-n", "external"}
	if conf != nil {
		path := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(path, conf, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-c", path)
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	listen := regexp.MustCompile(`Listening for client connections on (\S+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listen.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case addr := <-found:
		return "nats://" + addr
	case <-time.After(10 * time.Second):
		t.Fatal("external nats-server did not start within 10s")
	}
	return ""
}

func TestExternalNATSRequestsStreamsAndPermissions(t *testing.T) {
	var subj Subjects
	conf, err := AuthorizationConfig(subj, "admin", "pw", []User{
		{Name: "mgr", Password: "m", Role: RoleManager},
		{Name: "p1", Password: "p", Role: RolePeer, Site: "site1", Peer: "p1"},
		{Name: "p2", Password: "q", Role: RolePeer, Site: "site1", Peer: "p2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	url := startExternalNATS(t, conf)

	mgr := mustConnect(t, url, ConnectOptions{User: "mgr", Password: "m"})
	var p1Errs asyncErrors
	p1 := mustConnect(t, url, ConnectOptions{User: "p1", Password: "p", OnAsyncError: p1Errs.add})
	p2 := mustConnect(t, url, ConnectOptions{User: "p2", Password: "q"})

	// Request/reply, no-responders.
	mustServe(t, mgr, "quarry.mgr.register.*", ServeOptions{}, echo("ext-leader"))
	r, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), p1, "quarry.mgr.register.p1", echoReq{Text: "p1"})
	if err != nil || r.Server != "ext-leader" {
		t.Fatalf("request via external NATS: %+v, %v", r, err)
	}
	if _, err := Request[echoReq, echoResp](ctxTimeout(t, 2*time.Second), p1, "quarry.mgr.nobody.p1", echoReq{}); !errors.Is(err, ErrNoResponders) {
		t.Fatalf("got %v, want ErrNoResponders", err)
	}

	// A peer-to-peer stream.
	data := randomBytes(t, 2<<20+3)
	var got bytes.Buffer
	svc, err := serveStreams(p2, "quarry.repl.site1.p2.*", ServeOptions{Logger: quiet}, StreamOptions{},
		func(ctx context.Context, m copyMeta, accept func(uint64) (*Receiver, error)) error {
			rcv, err := accept(0)
			if err != nil {
				return err
			}
			_, err = io.Copy(&got, rcv.Reader(ctx))
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop(context.Background())
	snd, err := openStream(ctxTimeout(t, 2*time.Second), p1, "quarry.repl.site1.p2.p1", copyMeta{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := SendReaderAt(ctxTimeout(t, 10*time.Second), snd, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("external stream: got %d bytes, want %d", got.Len(), len(data))
	}

	// The generated authorization block holds: p1 cannot publish a fixup task.
	fix, err := p2.SubscribeSync("quarry.fixup.site1.p2")
	if err != nil {
		t.Fatal(err)
	}
	_ = p2.Flush()
	_ = p1.Publish("quarry.fixup.site1.p2", []byte("forged"))
	_ = p1.Flush()
	testutil.WaitFor(t, 5*time.Second, func() error { return p1Errs.violation("quarry.fixup.site1.p2") })
	_ = mgr.Publish("quarry.fixup.site1.p2", []byte("real"))
	if m, err := fix.NextMsg(2 * time.Second); err != nil || string(m.Data) != "real" {
		t.Fatalf("p2 got %v, %v; want only the manager's task", m, err)
	}
}
