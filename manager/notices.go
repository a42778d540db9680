package manager

import (
	"context"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// The notice publisher of a leadership term: a Notice on <prefix>.gen when
// the term starts and after every change peers and search heads act on.

// publishNotices publishes a Notice when the term starts (a new leader
// serves) and after every applied entry that changed the generation, the
// table version or the peer config.
func (t *natsTerm) publishNotices(ctx context.Context) {
	m := t.m
	select {
	case <-ctx.Done():
		return
	case <-t.subscribed:
	}
	var last api.Status
	first := true
	for {
		var (
			st    api.Status
			maint bool
		)
		m.state.Read(func(s *fsm.State) {
			st = api.Status{Generation: s.CurrentGeneration(), TableVersion: s.TableVersion(), ConfigID: m.peerConfigFor(s, true).ID}
			maint = s.Maintenance()
		})
		var kinds []api.NoticeKind
		if first {
			kinds = append(kinds, api.NoticeLeader)
		}
		if !first && (st.Generation != last.Generation || st.TableVersion != last.TableVersion) {
			kinds = append(kinds, api.NoticeGeneration)
		}
		if !first && st.ConfigID != last.ConfigID {
			kinds = append(kinds, api.NoticeConfig)
		}
		if len(kinds) > 0 {
			n := api.Notice{V: api.WireVersion, Kinds: kinds, Leader: m.cfg.ID, Maintenance: maint, Status: st}
			if err := bus.Publish(m.nc, m.subjects.Gen(), n); err != nil {
				m.log.Warn("publishing a generation notice failed", "err", err)
			} else {
				m.metrics.notices.Inc()
			}
		}
		last, first = st, false
		select {
		case <-ctx.Done():
			return
		case <-m.applied:
		}
	}
}
