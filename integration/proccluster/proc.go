package proccluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is one `quarry` process of the cluster. It keeps its command line,
// so a killed process restarts from its data dir with the same flags; its
// output goes to <dir>/<name>.log (appended across restarts).
type Proc struct {
	Name string
	Role string // bus, manager, peer or searchhead
	Site string
	// URL is the process's HTTP base URL (managers, peers and search
	// heads) or its NATS client URL (bus nodes).
	URL string
	// DataDir is the data folder of a manager or peer ("" for the others).
	DataDir string

	bin, logPath string
	args         []string
	log          *slog.Logger

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been reaped
	paused bool
	starts int
}

// ErrNotRunning is returned by a signal to a process that is not running.
var ErrNotRunning = errors.New("process not running")

// Start launches the process (again, after a kill, with the same flags).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("start %s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	fmt.Fprintf(logf, "=== %s start #%d: %s %v\n", time.Now().Format(time.RFC3339Nano), p.starts+1, p.bin, p.args)
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C at the terminal reaches only the
	// launcher, which then stops every process itself. Should the
	// launcher die without doing so (SIGKILL), the kernel kills the child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.starts++
	p.cmd, p.paused = cmd, false
	exited := make(chan struct{})
	p.exited = exited
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.cmd, p.paused = nil, false
		}
		p.mu.Unlock()
		p.log.Debug("process exited", "proc", p.Name, "err", err)
		close(exited)
	}()
	p.log.Debug("process started", "proc", p.Name, "pid", cmd.Process.Pid)
	return nil
}

// Running says whether the process is running (paused or not).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Paused says whether the process is stopped by SIGSTOP.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Pid is the running process's id (0 when it is not running).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *Proc) signal(sig syscall.Signal) (chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil, fmt.Errorf("%s %s: %w", sig, p.Name, ErrNotRunning)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return nil, fmt.Errorf("%s %s: %w", sig, p.Name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.exited, nil
}

// Kill sends SIGKILL and waits until the process is reaped.
func (p *Proc) Kill() error {
	exited, err := p.signal(syscall.SIGKILL)
	if err != nil {
		return err
	}
	<-exited // SIGKILL cannot be caught; a stopped process dies too
	return nil
}

// Pause sends SIGSTOP.
func (p *Proc) Pause() error {
	_, err := p.signal(syscall.SIGSTOP)
	return err
}

// Resume sends SIGCONT.
func (p *Proc) Resume() error {
	_, err := p.signal(syscall.SIGCONT)
	return err
}

// Stop ends the process gracefully: SIGCONT (a stopped process cannot
// handle SIGTERM), SIGTERM, and SIGKILL if it has not exited within grace.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		p.log.Warn("process did not stop in time; killing it", "proc", p.Name, "grace", grace)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// LogPath is the file the process writes its output to.
func (p *Proc) LogPath() string { return p.logPath }
