package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The configuration bundle (SPEC §5, issue 28): the index-time rules every
// peer applies to the events it ingests — Splunk's props.conf and
// transforms.conf, a documented subset (package knowledge parses them).
// The managers keep the bundle in the state by content hash: an operator
// applies a folder (`quarry cluster bundle apply DIR`, POST /v1/bundle),
// the leader validates it (knowledge.ParseIndexRules) and proposes
// SetBundle; peers see the hash in their config, fetch the files over NATS
// (mgr.bundle.<peer>) and report the hash they run in their heartbeats.
//
// The FSM does not parse the files (it imports nothing of quarry's): it
// checks names and sizes, and keeps what the leader validated. The bundle
// is its own command and its own part of the state, not of Config, so a
// POST /v1/config (which replaces the whole config) never drops it.

// BundleVersion is the cluster version from which the state carries a
// configuration bundle (CmdSetBundle).
const BundleVersion = 8

// MaxBundleBytes caps a bundle's files together: one NATS message carries
// them to a peer (the bus's default payload limit is 1 MiB).
const MaxBundleBytes = 512 << 10

// BundleFiles are the file names a configuration bundle may hold.
var BundleFiles = []string{"props.conf", "transforms.conf"}

// ConfigBundle is the configuration bundle in force.
type ConfigBundle struct {
	// Hash names the content ("sha256:…", knowledge.Files.Hash).
	Hash string `json:"hash"`
	// Files are the bundle's files by base name; text, kept as strings so
	// a copy of the state shares no mutable memory.
	Files map[string]string `json:"files"`
	// Index is the Raft index that applied it.
	Index uint64 `json:"index"`
}

// SetBundle replaces the configuration bundle (an empty Files removes it).
type SetBundle struct {
	ReqID
	Hash  string            `json:"hash"`
	Files map[string]string `json:"files"`
}

func (SetBundle) Type() CommandType { return CmdSetBundle }

func init() {
	register(CmdSetBundle, applySetBundle)
	clusterVersions[CmdSetBundle] = BundleVersion
}

// ErrBadBundle: a bundle with an unknown file name, too large, or without
// a hash.
var ErrBadBundle = fmt.Errorf("bad bundle")

// CheckBundle validates what the FSM can see of a bundle.
func CheckBundle(c *SetBundle) error {
	total := 0
	for name, b := range c.Files {
		if !slices.Contains(BundleFiles, name) {
			return fmt.Errorf("%w: file %q: a bundle holds only %s", ErrBadBundle, name, strings.Join(BundleFiles, " and "))
		}
		total += len(b)
	}
	if total > MaxBundleBytes {
		return fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrBadBundle, total, MaxBundleBytes)
	}
	if len(c.Files) > 0 && !strings.HasPrefix(c.Hash, "sha256:") {
		return fmt.Errorf("%w: hash %q: want sha256:<hex>", ErrBadBundle, c.Hash)
	}
	return nil
}

// applySetBundle puts the bundle in force (no files: none). A plain
// function, not a State method: State has too many already.
func applySetBundle(s *State, idx uint64, c *SetBundle) (any, error) {
	if err := CheckBundle(c); err != nil {
		return nil, err
	}
	if len(c.Files) == 0 {
		s.d.Bundle = nil
		return nil, nil
	}
	s.d.Bundle = &ConfigBundle{Hash: c.Hash, Files: maps.Clone(c.Files), Index: idx}
	return nil, nil
}

// BundleOf returns a copy of the configuration bundle in force, nil when
// there is none.
func BundleOf(s *State) *ConfigBundle {
	if s.d.Bundle == nil {
		return nil
	}
	b := *s.d.Bundle
	b.Files = maps.Clone(b.Files)
	return &b
}

// BundleHashOf is the hash of the bundle in force, "" when none.
func BundleHashOf(s *State) string {
	if s.d.Bundle == nil {
		return ""
	}
	return s.d.Bundle.Hash
}
