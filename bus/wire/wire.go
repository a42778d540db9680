// Package wire holds the parts of the bus protocol that travel inside other
// packages' messages and need no connection: the remote error a handler
// returns with its code, the stream invite, and the subject-token rule.
// It imports no NATS (nor any other transport), so the message packages
// (api) can embed these types and stay data and codecs only; package bus
// re-exports every name here and owns the transport.
package wire

import (
	"errors"
	"fmt"
	"unicode"
)

// Remote error codes used by bus itself; roles define their own.
const (
	CodeBadRequest = "bad_request" // the request could not be decoded
	CodeInternal   = "internal"    // the handler failed without a code
	CodeShutdown   = "shutdown"    // the service stopped while handling
)

// RemoteError is an error returned by the handler on the other side of a
// request, carried back with its code.
type RemoteError struct {
	Subject string // the request subject ("" on the handler side)
	Code    string
	Message string
}

func (e *RemoteError) Error() string {
	if e.Subject == "" {
		return fmt.Sprintf("%s: %s", e.Code, e.Message)
	}
	return fmt.Sprintf("remote %s: %s: %s", e.Subject, e.Code, e.Message)
}

// Errorf builds a RemoteError a handler returns to give its error a code.
func Errorf(code, format string, args ...any) error {
	return &RemoteError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// IsRemote reports whether err is a remote error with the given code.
func IsRemote(err error, code string) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Code == code
}

// Invite tells a sender where and how to send a stream. The receiver makes
// it; it travels inside a request (receiver-initiated, e.g. search results)
// or a reply (sender-initiated, OpenStream).
type Invite struct {
	Version     int    `json:"v"`
	Inbox       string `json:"inbox"`
	Resume      uint64 `json:"resume"` // the first chunk seq the receiver wants
	Window      int    `json:"window"`
	ChunkSize   int    `json:"chunk_size"`
	HeartbeatMs int64  `json:"heartbeat_ms"`
	IdleMs      int64  `json:"idle_ms"`
}

// ErrInvalidToken is returned when a name that becomes a subject token (a
// site, a peer id, an op, a bundle hash, a results name, a prefix token) is
// empty or contains '.', '*', '>', whitespace or a control character.
var ErrInvalidToken = errors.New("invalid subject token")

// ValidToken reports whether name can be one subject token; kind names what
// the token is ("site", "peer", …) in the error.
func ValidToken(kind, name string) error {
	if name == "" {
		return fmt.Errorf("%s name is empty: %w", kind, ErrInvalidToken)
	}
	for _, r := range name {
		switch {
		case r == '.' || r == '*' || r == '>':
			return fmt.Errorf("%s name %q contains %q: %w", kind, name, r, ErrInvalidToken)
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return fmt.Errorf("%s name %q contains whitespace or a control character: %w", kind, name, ErrInvalidToken)
		}
	}
	return nil
}
