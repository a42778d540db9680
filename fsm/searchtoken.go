package fsm

import (
	"fmt"
	"strings"
)

// SearchToken is a search token of the cluster config (SPEC §11): the
// indexes its searches may read (none listed: every index). Search heads
// and peers read them from the managers; the flag `--search-token
// T[=index,…]` is parsed by cmd/quarry.
type SearchToken struct {
	Token   string   `json:"token"`
	Indexes []string `json:"indexes,omitempty"`
	// Publish lists the result names a search with this token may publish
	// to (`"publish"` of a search request, subject results.<name>): each a
	// name, or a prefix ending in "*" ("team-a.*"). Absent: any name, as
	// before it existed (review L2). Set only by a group at cluster version
	// PublishScopeVersion.
	Publish []string `json:"publish,omitempty"`
}

// PublishScopeVersion is the cluster version from which a search token may
// carry Publish (an older manager would drop the field).
const PublishScopeVersion = 6

// MaxPublishPatterns bounds a search token's Publish list.
const MaxPublishPatterns = 64

// MayPublish reports whether the token may publish results under name.
func (t SearchToken) MayPublish(name string) bool {
	if t.Publish == nil {
		return true
	}
	for _, p := range t.Publish {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, pre) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// validPublishPattern accepts a result name of dot-separated parts of
// letters, digits, '_' and '-', or such a prefix (it may end in a dot)
// followed by "*", or "*" alone (any name); at most 128 bytes.
func validPublishPattern(p string) error {
	if len(p) > 128 {
		return fmt.Errorf("publish pattern %q: at most 128 bytes", p)
	}
	name, wild := strings.CutSuffix(p, "*")
	if wild {
		if name == "" {
			return nil
		}
		name = strings.TrimSuffix(name, ".")
	}
	for _, part := range strings.Split(name, ".") {
		if part == "" {
			return fmt.Errorf("publish pattern %q: a result name or a prefix ending in *, without empty parts between dots", p)
		}
		for _, r := range part {
			if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return fmt.Errorf("publish pattern %q: %q is not allowed (letters, digits, '.', '_', '-', a final '*')", p, r)
			}
		}
	}
	return nil
}
