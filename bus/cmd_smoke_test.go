package bus

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/quarry-dev/quarry/internal/testutil"
)

var (
	binDir     string
	buildOnce  sync.Once
	quarryBin  string
	quarryErr  error
	readyRegex = regexp.MustCompile(`msg="bus ready".* client_url=(\S+) cluster_url=(\S*) gateway_url=(\S*) monitor_url=(\S*)`)
)

func TestMain(m *testing.M) {
	// nats-server waits 1 s before soliciting gateways (to let a site's
	// routes form first); in-process tests need not.
	server.SetGatewaysSolicitDelay(20 * time.Millisecond)
	dir, err := os.MkdirTemp("", "quarry-bus-test-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildQuarry builds cmd/quarry once per test binary, only for the tests
// that run it (so `go test -run TestSubjects` stays instant).
func buildQuarry(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		quarryBin = filepath.Join(binDir, "quarry")
		cmd := exec.Command("go", "build", "-o", quarryBin, "github.com/quarry-dev/quarry/cmd/quarry")
		out, err := cmd.CombinedOutput()
		if err != nil {
			quarryErr = errors.New(string(out))
		}
	})
	if quarryErr != nil {
		t.Fatalf("build quarry: %v", quarryErr)
	}
	return quarryBin
}

type busProc struct {
	cmd   *exec.Cmd
	lines chan string
	log   strings.Builder
	mu    sync.Mutex
	done  chan error
}

// startBus runs `quarry bus args…` with env and waits for its ready line.
func startBus(t *testing.T, env []string, args ...string) (*busProc, []string) {
	t.Helper()
	cmd := exec.Command(buildQuarry(t), append([]string{"bus"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &busProc{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	deadline := time.After(15 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if m := readyRegex.FindStringSubmatch(l); m != nil {
				return p, m[1:]
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("quarry bus exited before ready: %v\n%s", err, p.output())
		case <-deadline:
			t.Fatalf("quarry bus not ready within 15s:\n%s", p.output())
		}
	}
}

func (p *busProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// stop sends SIGTERM and expects a clean exit within 5 s.
func (p *busProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("quarry bus exited with %v after SIGTERM:\n%s", err, p.output())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("quarry bus still running 5s after SIGTERM")
	}
	if !strings.Contains(p.output(), `msg="bus stopped"`) {
		t.Fatalf("no shutdown log line:\n%s", p.output())
	}
}

func TestQuarryBusProcessSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the quarry binary")
	}
	// Site 1 from flags, with auth, roles and monitoring.
	p1, urls1 := startBus(t, nil, "--name", "n1", "--site", "site1", "--listen", "127.0.0.1:0",
		"--gateway-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--user", "admin", "--password", "pw",
		"--role-user", "manager=mgr:m", "--role-user", "peer=peer:p", "--role-user", "peer/site2/p4=p4:p4pw")
	// Site 2 from environment variables only, gatewayed to site 1.
	p2, urls2 := startBus(t, []string{
		"QUARRY_NAME=n2", "QUARRY_SITE=site2", "QUARRY_LISTEN=127.0.0.1:0",
		"QUARRY_GATEWAY_LISTEN=127.0.0.1:0", "QUARRY_GATEWAYS=site1=" + urls1[2],
		"QUARRY_USER=admin", "QUARRY_PASSWORD=pw", "QUARRY_ROLE_USER=peer/site2/p4=p4:p4pw,manager=mgr:m",
	})

	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(urls1[3] + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %s", resp.Status)
	}

	// A manager in site1 asks p4 in site2; p4 answers across the gateway.
	p4 := mustConnect(t, urls2[0], ConnectOptions{User: "p4", Password: "p4pw"})
	mustServe(t, p4, "quarry.search.site2.p4", ServeOptions{}, echo("p4"))
	sh := mustConnect(t, urls1[0], ConnectOptions{User: "admin", Password: "pw"})
	testutil.WaitFor(t, 10*time.Second, func() error {
		r, err := Request[echoReq, echoResp](ctxTimeout(t, 250*time.Millisecond), sh, "quarry.search.site2.p4", echoReq{Text: "x"})
		if err == nil && r.Server != "p4" {
			return errors.New("wrong responder")
		}
		return err
	})

	// Permissions hold in the real binary: a peer cannot publish a fixup task.
	var errs asyncErrors
	peer := mustConnect(t, urls1[0], ConnectOptions{User: "peer", Password: "p", OnAsyncError: errs.add})
	_ = peer.Publish("quarry.fixup.site2.p4", []byte("nope"))
	_ = peer.Flush()
	testutil.WaitFor(t, 5*time.Second, func() error { return errs.violation("quarry.fixup.site2.p4") })

	p2.stop(t)
	p1.stop(t)
}

func TestQuarryBusRefusesBadConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the quarry binary")
	}
	bin := buildQuarry(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bus", "--name", "n1"}, `Required flag "site" not set`},
		{[]string{"bus", "--name", "n1", "--site", "a.b", "--listen", "127.0.0.1:0"}, `site name "a.b" contains '.'`},
		{[]string{"bus", "--name", "n1", "--site", "s", "--listen", "127.0.0.1:0", "--role-user", "boss=x:y"}, `unknown role "boss"`},
		{[]string{"bus", "--name", "n1", "--site", "s", "--listen", "127.0.0.1:0", "--gateways", "site2"}, `gateway "site2": want site=nats://host:port`},
		{[]string{"bus", "--name", "n1", "--site", "s", "--role-user", "peer=p1", "--print-auth-config"}, `want ROLE=NAME:PASSWORD`},
		// Review N3's node: role users, a gateway, no --user and no TLS.
		{[]string{"bus", "--name", "a", "--site", "site1", "--listen", "127.0.0.1:0", "--gateway-listen", "127.0.0.1:0",
			"--role-user", "peer/site1/p1=p1:pw1", "--role-user", "manager=m1:mpw"}, ErrOpenLink.Error()},
	}
	for _, c := range cases {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%v: exit %v, want non-zero", c.args, err)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%v: output %q does not say %q", c.args, out, c.want)
		}
	}
}

func TestQuarryBusPrintsAuthConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the quarry binary")
	}
	out, err := exec.Command(buildQuarry(t), "bus", "--name", "n1", "--site", "site1",
		"--role-user", "peer/site1/p1=p1:pw", "--print-auth-config").Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := AuthorizationConfig(Subjects{}, "", "", []User{{Name: "p1", Password: "pw", Role: RolePeer, Site: "site1", Peer: "p1"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(want) {
		t.Fatalf("printed:\n%s\nwant:\n%s", out, want)
	}
}
