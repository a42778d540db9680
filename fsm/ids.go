package fsm

import (
	"errors"
	"fmt"
)

// ErrBadID is wrapped by every refusal of an id that arrived from the
// network (ValidBucketID, ValidIndexName, ValidGUID, ValidName).
var ErrBadID = errors.New("invalid id")

// The one validator of ids that arrive from the network (SPEC §6): every
// boundary — the manager's NATS handlers, a peer's replication receiver,
// its fixup task handling, its search requests' bucket lists — checks the
// ids it is given with these before it looks anything up, and a peer's
// store names folders only after them. A bucket id is
// <index>~<decimal local id>~<origin GUID>, each part of a closed
// alphabet, so no id can name a path outside the data dir ('/', '\\' and
// '.' are in none of them). The rules are those the store has always used
// for the folders it opens; ParseBucketID, which Apply calls, stays as
// lenient as it was, so the replay of an existing log does not change.

// MaxLocalIDLen bounds the decimal local id of a bucket id (a uint64).
const MaxLocalIDLen = 20

// ValidIndexName checks an index name: a-z, 0-9, '_' and '-' (not first),
// 1 to 80 bytes.
func ValidIndexName(name string) error {
	if err := checkIndexName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrBadID, err)
	}
	return nil
}

// ValidGUID checks a peer GUID as it appears in a bucket id: letters,
// digits and '-' (not first), 1 to 64 bytes.
func ValidGUID(guid string) error {
	if guid == "" || len(guid) > 64 {
		return fmt.Errorf("%w: guid %q: want 1 to 64 characters", ErrBadID, guid)
	}
	for i := 0; i < len(guid); i++ {
		c := guid[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (i > 0 && c == '-')
		if !ok {
			return fmt.Errorf("%w: guid %q: only letters, digits and '-' (not first)", ErrBadID, guid)
		}
	}
	return nil
}

// ValidLocalID checks a bucket's local id: a decimal number.
func ValidLocalID(local string) error {
	if local == "" || len(local) > MaxLocalIDLen {
		return fmt.Errorf("%w: local id %q: want 1 to %d digits", ErrBadID, local, MaxLocalIDLen)
	}
	for i := 0; i < len(local); i++ {
		if local[i] < '0' || local[i] > '9' {
			return fmt.Errorf("%w: local id %q: only digits", ErrBadID, local)
		}
	}
	return nil
}

// ValidBucketID checks a bucket id, <index>~<localid>~<originGUID>, part
// by part, and returns the parts.
func ValidBucketID(id string) (index, localID, guid string, err error) {
	if len(id) > 80+1+MaxLocalIDLen+1+64 {
		return "", "", "", fmt.Errorf("%w: bucket id of %d bytes", ErrBadID, len(id))
	}
	index, localID, guid, err = ParseBucketID(id)
	if err != nil {
		return "", "", "", fmt.Errorf("%w: %w", ErrBadID, err)
	}
	if err := ValidIndexName(index); err != nil {
		return "", "", "", fmt.Errorf("bucket id %q: %w", id, err)
	}
	if err := ValidLocalID(localID); err != nil {
		return "", "", "", fmt.Errorf("bucket id %q: %w", id, err)
	}
	if err := ValidGUID(guid); err != nil {
		return "", "", "", fmt.Errorf("bucket id %q: %w", id, err)
	}
	return index, localID, guid, nil
}

// ValidName checks a peer id or a site name (kind says which, for the
// error): 1 to 128 bytes, none of them '.', '*', '>', '/', '\\', '~',
// whitespace or a control character — so it is one NATS subject token and
// no path.
func ValidName(kind, name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("%w: %s name %q: want 1 to 128 characters", ErrBadID, kind, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' || c == '/' || c == '\\' || c == '~' {
			return fmt.Errorf("%w: %s name %q contains %q", ErrBadID, kind, name, c)
		}
	}
	return nil
}
