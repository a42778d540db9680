package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/integration/proccluster"
)

// Disk-fault modes (-disk).
const (
	diskTmpfs  = "tmpfs"  // each peer's data dir is its own size-limited tmpfs; the fault fills it
	diskManual = "manual" // no mount allowed: the fault detains the peer by the admin API instead
	diskAuto   = "auto"   // tmpfs when this process may mount one, else manual
)

// diskFaults fills a peer's data disk. With tmpfs, every peer's data dir
// is a tmpfs of size bytes, the managers detain a peer with less than
// threshold bytes free (--detention-free-bytes), and the fault writes a
// ballast file that leaves threshold/2 free: a real disk filling up, seen
// by the peer's statfs and reported in its heartbeats.
type diskFaults struct {
	mode      string
	size      int64
	threshold int64
	log       *slog.Logger

	mu      sync.Mutex
	mounts  []string
	ballast map[string]string // peer → ballast file
	manual  map[string]bool   // peers detained by the fault (manual mode)
}

// newDiskFaults settles the mode: auto tries to mount a probe tmpfs
// under dir.
func newDiskFaults(mode, dir string, size, threshold int64, log *slog.Logger) (*diskFaults, error) {
	d := &diskFaults{mode: mode, size: size, threshold: threshold, log: log, ballast: map[string]string{}, manual: map[string]bool{}}
	if mode != diskAuto && mode != diskTmpfs && mode != diskManual {
		return nil, fmt.Errorf("-disk %q: want auto, tmpfs or manual", mode)
	}
	if mode == diskManual {
		return d, nil
	}
	probe := filepath.Join(dir, "tmpfs-probe")
	if err := os.MkdirAll(probe, 0o755); err != nil {
		return nil, err
	}
	err := syscall.Mount("tmpfs", probe, "tmpfs", 0, "size=1m")
	if err == nil {
		err = syscall.Unmount(probe, 0)
	}
	os.Remove(probe)
	if err != nil {
		if mode == diskTmpfs {
			return nil, fmt.Errorf("-disk tmpfs: mount a tmpfs: %w", err)
		}
		log.Warn("cannot mount a tmpfs; disk-full faults detain peers through the admin API instead", "err", err)
		d.mode = diskManual
		return d, nil
	}
	d.mode = diskTmpfs
	return d, nil
}

// managerArgs are the detention flags the managers run with.
func (d *diskFaults) managerArgs() []string {
	if d.mode != diskTmpfs {
		// Peers share the machine's disk: never detain automatically.
		return []string{"--detention-free-bytes", "-1"}
	}
	return []string{"--detention-free-bytes", strconv.FormatInt(d.threshold, 10),
		"--detention-hysteresis-bytes", strconv.FormatInt(d.threshold/4, 10)}
}

// prepare mounts a peer's data dir as a tmpfs (managers keep the disk).
func (d *diskFaults) prepare(name, dir string) error {
	if d.mode != diskTmpfs || !strings.Contains(name, "-p") {
		return nil
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(d.size, 10)); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	d.mu.Lock()
	d.mounts = append(d.mounts, dir)
	d.mu.Unlock()
	return nil
}

// unmount removes every tmpfs (after the processes stopped).
func (d *diskFaults) unmount() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.mounts {
		if err := syscall.Unmount(m, 0); err != nil {
			d.log.Error("unmount", "dir", m, "err", err)
		}
	}
	d.mounts = nil
}

func freeBytes(dir string) (int64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Bavail) * int64(fs.Bsize), nil
}

// fill writes a ballast file into peer p's data dir that leaves
// threshold/2 bytes free.
func (d *diskFaults) fill(p *proccluster.Proc) (string, error) {
	free, err := freeBytes(p.DataDir)
	if err != nil {
		return "", err
	}
	n := free - d.threshold/2
	if n <= 0 {
		return fmt.Sprintf("already only %d MiB free", free>>20), nil
	}
	path := filepath.Join(p.DataDir, "chaos-ballast")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	d.mu.Lock()
	d.ballast[p.Name] = path
	d.mu.Unlock()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
		return "", fmt.Errorf("fallocate %d bytes: %w", n, err)
	}
	after, _ := freeBytes(p.DataDir)
	return fmt.Sprintf("ballast of %d MiB: %d MiB of %d MiB free, detention below %d MiB", n>>20, after>>20, d.size>>20, d.threshold>>20), nil
}

// clear removes every ballast and lifts every manual detention.
func (d *diskFaults) clear(ctx context.Context, cl *proccluster.Cluster) {
	d.mu.Lock()
	ballast, manual := d.ballast, d.manual
	d.ballast, d.manual = map[string]string{}, map[string]bool{}
	d.mu.Unlock()
	for _, path := range ballast {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.log.Error("remove ballast", "path", path, "err", err)
		}
	}
	for id := range manual {
		if mc, err := cl.ManagerClient(5 * time.Second); err == nil {
			if err := mc.SetDetention(ctx, id, false); err != nil {
				d.log.Error("lift detention", "peer", id, "err", err)
			}
		}
	}
}

// diskFull fills a random peer's disk (or, in manual mode, detains it by
// the admin API), waits until the managers report it in Detention, keeps
// it there 2-5 s, and frees the disk. A detained peer keeps serving
// searches (SPEC §3): every copy stays searchable.
func (f *faulter) diskFull(ctx context.Context, ft *fault) error {
	p := f.pick(f.cl.Peers)
	ft.Target = p.Name
	f.cover(ctx, ft, anyCopy)
	ft.Start = time.Now()
	if f.disk.mode == diskTmpfs {
		detail, err := f.disk.fill(p)
		ft.Detail = detail
		if err != nil {
			return err
		}
	} else {
		mc, err := f.cl.ManagerClient(5 * time.Second)
		if err != nil {
			return err
		}
		f.disk.mu.Lock()
		f.disk.manual[p.Name] = true
		f.disk.mu.Unlock()
		ft.Detail = "manual detention through POST /v1/peers/{id}/detention (no tmpfs)"
		if err := mc.SetDetention(ctx, p.Name, true); err != nil {
			return err
		}
	}
	err := proccluster.WaitFor(ctx, 30*time.Second, func() error {
		mc, err := f.cl.ManagerClient(3 * time.Second)
		if err != nil {
			return err
		}
		st, err := mc.Status(ctx)
		if err != nil {
			return err
		}
		for _, ps := range st.Peers {
			if ps.ID == p.Name && ps.State == fsm.StateDetention {
				return nil
			}
		}
		return fmt.Errorf("%s not in Detention", p.Name)
	})
	if err != nil {
		return fmt.Errorf("disk full: the managers did not detain the peer: %w", err)
	}
	hold(ctx, f.outage(2*time.Second, 5*time.Second))
	f.cover(ctx, ft, anyCopy)
	f.disk.clear(ctx, f.cl)
	return nil
}
