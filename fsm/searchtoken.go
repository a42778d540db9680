package fsm

// SearchToken is a search token of the cluster config (SPEC §11): the
// indexes its searches may read (none listed: every index). Search heads
// and peers read them from the managers; the flag `--search-token
// T[=index,…]` is parsed by cmd/quarry.
type SearchToken struct {
	Token   string   `json:"token"`
	Indexes []string `json:"indexes,omitempty"`
}

// Allows reports whether the token may read an index.
func (t SearchToken) Allows(index string) bool {
	if len(t.Indexes) == 0 {
		return true
	}
	for _, ix := range t.Indexes {
		if ix == index {
			return true
		}
	}
	return false
}
