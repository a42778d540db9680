package testutil

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"time"
)

// TLSProbe completes a TLS handshake with addr under cfg and reads once:
// nil when the server accepted the client (the read waits for data that
// does not come, or the server closes cleanly), else the error — a server
// that refuses the client's certificate says so in an alert on the first
// read (TLS 1.3). Every step is bounded by 5 s.
func TLSProbe(addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
