package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procCPU is the CPU time (user + system, seconds) process pid has used so
// far, read from /proc (Linux); ok is false where it cannot be read. The
// ingest figures print it so that a ratio of rates on one machine shows
// what it is made of: at RF=3 every event is indexed twice (origin and a
// searchable replica) and stored three times, on the same two cores.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command (which may hold spaces) start after ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(utime+stime) / clockTicks, true
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// standaloneIngestCPU is the standalone peer's CPU per event (µs) for its
// ingest in this run (0: it reused its data, nothing measured).
var standaloneIngestCPU float64
