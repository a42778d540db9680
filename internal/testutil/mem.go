package testutil

import (
	"bufio"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// ProcStatus reads a "VmRSS"-style line of /proc/self/status, in bytes (0
// when there is none, off Linux).
func ProcStatus(key string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// MemPeak samples, until End, the Go heap in use, the live heap (what the
// last GC found reachable: what the code holds, whatever the GC's pacing
// leaves as garbage) and the process's RSS, and reports their growth over
// the baseline at StartMemPeak. VmHWM is reset first (clear_refs 5) where
// the kernel allows, so the peak RSS covers only what the test does. It is
// how a test bounds what a hostile request costs the process it runs in
// (the gzip bombs of HEC, the searches of issue 26).
type MemPeak struct {
	HeapBase, LiveBase, RSSBase uint64
	heap, live, rss             uint64
	stop, done                  chan struct{}
}

func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// StartMemPeak takes the baseline (after a GC) and starts sampling every
// 2 ms.
func StartMemPeak() *MemPeak {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	m := &MemPeak{HeapBase: ms.HeapInuse, LiveBase: liveHeap(), RSSBase: ProcStatus("VmRSS"), stop: make(chan struct{}), done: make(chan struct{})}
	m.heap, m.live, m.rss = m.HeapBase, m.LiveBase, m.RSSBase
	go func() {
		defer close(m.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			m.heap = max(m.heap, ms.HeapInuse)
			m.live = max(m.live, liveHeap())
			m.rss = max(m.rss, ProcStatus("VmRSS"))
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

// End stops sampling and returns the growth of the heap in use, the live
// heap and the RSS (the larger of the sampled peak and VmHWM) over the
// baseline. A last GC makes the live heap cover the end of the run.
func (m *MemPeak) End() (heap, live, rss uint64) {
	close(m.stop)
	<-m.done
	runtime.GC()
	m.live = max(m.live, liveHeap())
	m.rss = max(m.rss, ProcStatus("VmHWM"))
	grow := func(peak, base uint64) uint64 {
		if peak < base {
			return 0
		}
		return peak - base
	}
	return grow(m.heap, m.HeapBase), grow(m.live, m.LiveBase), grow(m.rss, m.RSSBase)
}
