package peer

import (
	"slices"
	"strings"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/peer/hec"
)

// hecTokensOf is HEC's view of the cluster config's tokens. A token that
// names no indexes may write to any index the cluster declares — every
// index only while auto_create_indexes is on — so an index removed from
// the config (quarry index remove) is refused at HEC with Splunk's
// "Incorrect index" (code 7) on every peer, whichever token is used. A
// config that declares no indexes at all (a bare control plane) leaves such
// tokens open, as before.
func hecTokensOf(cfg api.PeerConfig) []hec.Token {
	var declared []string
	if !cfg.AutoCreateIndexes && len(cfg.Indexes) > 0 {
		declared = []string{"main"} // always exists (fsm.Config.Validate)
		for _, ic := range cfg.Indexes {
			if !slices.Contains(declared, ic.Name) {
				declared = append(declared, ic.Name)
			}
		}
		slices.Sort(declared)
	}
	var out []hec.Token
	for _, t := range cfg.HECTokens {
		ht := hec.TokenFromConfig(t)
		if len(cfg.TokenKey) > 0 && strings.HasPrefix(t.Token, fsm.KeyedDigestPrefix) {
			ht.Key = cfg.TokenKey
		}
		if len(ht.Indexes) == 0 && declared != nil {
			ht.Indexes = declared
			if ht.DefaultIndex == "" {
				ht.DefaultIndex = "main"
			}
		}
		out = append(out, ht)
	}
	return out
}
