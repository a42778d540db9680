package testutil

import (
	"bufio"
	"io"
	"strings"
)

// listening is what `quarry peer` prints on standard output, followed by
// its URL, once it serves (cmd/quarry/cmd_peer.go).
const listening = "listening on "

// ListeningOn reads r, a quarry process's standard output, to its end in a
// goroutine. The address after the first "listening on " goes on addr
// (buffered: the reader never waits for it); drained is closed once r is
// read to its end, after which the process may be waited for.
func ListeningOn(r io.Reader) (addr <-chan string, drained <-chan struct{}) {
	a := make(chan string, 1)
	d := make(chan struct{})
	go func() {
		defer close(d)
		sent := false
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if i := strings.Index(sc.Text(), listening); i >= 0 && !sent {
				a <- strings.TrimSpace(sc.Text()[i+len(listening):])
				sent = true
			}
		}
		io.Copy(io.Discard, r) // a line too long for the scanner
	}()
	return a, d
}
