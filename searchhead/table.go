package searchhead

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
)

// tablePoll is the backstop poll of the generation table: notices on
// <prefix>.gen are at most once, so the head also asks for changes every
// tablePoll (SPEC §5 step 1: "every 5 s at most").
const tablePoll = 5 * time.Second

// tables keeps the generation tables the head needs current — its own
// site's (or site0's) primaries and, for _primary/_replica preferences,
// site0's — from <prefix>.gen notices and deltas since its version; never
// fetched per search. Searches read it under the read lock.
type tables struct {
	mc    *mgrclient.ManagerClient
	log   *slog.Logger
	sites []string // table sites kept: the head's site first, then site0

	mu     sync.RWMutex
	loaded bool
	// bySite holds each table site's table: the head's own (sites[0])
	// keeps the generation, the peers and the buckets searches plan
	// from; site0's is read for its primaries only (apply).
	bySite map[string]*fsm.GenerationTable[fsm.BucketInfo]
	lastOK time.Time
	// okStart is when the last successful refresh began, okVersion the own
	// table's version it left: a refresh that began after a moment is a
	// barrier for it (barrierSince).
	okStart   time.Time
	okVersion uint64
	lastErr   error
	stale     bool // the last refresh failed: searches use the last known table and say so

	// refreshMu serialises refreshes: the loop's and a search's catch-up
	// (refreshNow) never interleave their deltas.
	refreshMu sync.Mutex

	kick chan struct{}
	stop chan struct{}
	wg   sync.WaitGroup
	sub  *nats.Subscription
	// hold is Config.HoldTable (a test hook).
	hold func() bool
	// onNotice is called for every notice (config changes).
	onNotice func(api.Notice)
	// fetchGen, when set, replaces the managers' generation request (a
	// test's scripted managers); fetch uses it.
	fetchGen func(ctx context.Context, site string, since uint64) (fsm.GenerationView, error)
}

// fetch asks the managers what changed in site's table since version since.
func (t *tables) fetch(ctx context.Context, site string, since uint64) (fsm.GenerationView, error) {
	if t.fetchGen != nil {
		return t.fetchGen(ctx, site, since)
	}
	return t.mc.FetchGeneration(ctx, site, since, 0)
}

func newTables(mc *mgrclient.ManagerClient, site string, log *slog.Logger) *tables {
	t := &tables{mc: mc, log: log, sites: []string{site}, bySite: map[string]*fsm.GenerationTable[fsm.BucketInfo]{},
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
	if site != fsm.Site0 {
		t.sites = append(t.sites, fsm.Site0)
	}
	for _, s := range t.sites {
		t.bySite[s] = t.newTable(s)
	}
	return t
}

// newTable is an empty table for a table site: the head's own site's
// keeps every bucket entry, another site's only its primaries.
func (t *tables) newTable(site string) *fsm.GenerationTable[fsm.BucketInfo] {
	if site == t.sites[0] {
		return fsm.NewGenerationTable()
	}
	return fsm.NewGenerationTableOf[fsm.BucketInfo](nil, nil)
}

// own is the head's own table site's table. t.mu held.
func (t *tables) own() *fsm.GenerationTable[fsm.BucketInfo] { return t.bySite[t.sites[0]] }

// version is the table version held for a table site (0: none). t.mu
// held.
func (t *tables) version(site string) uint64 {
	if tb := t.bySite[site]; tb != nil {
		return tb.Version()
	}
	return 0
}

// primary is a bucket's primary in a table site's table ("": none).
// t.mu held.
func (t *tables) primary(site, bucket string) string {
	if tb := t.bySite[site]; tb != nil {
		p, _ := tb.Primary(bucket)
		return p
	}
	return ""
}

// start subscribes to notices and runs the refresh loop.
func (t *tables) start(nc *nats.Conn, subj bus.Subjects) error {
	var err error
	t.sub, err = nc.Subscribe(subj.Gen(), func(m *nats.Msg) {
		var n api.Notice
		if err := bus.Decode(m, &n); err != nil {
			return
		}
		if t.onNotice != nil {
			t.onNotice(n)
		}
		t.mu.RLock()
		behind := !t.loaded || n.Generation != t.own().Generation() || n.TableVersion > t.minVersion()
		t.mu.RUnlock()
		if behind {
			t.refreshSoon()
		}
	})
	if err != nil {
		return fmt.Errorf("search head: subscribe %s: %w", subj.Gen(), err)
	}
	t.wg.Add(1)
	go t.loop()
	return nil
}

func (t *tables) close() {
	if t.sub != nil {
		_ = t.sub.Unsubscribe()
	}
	close(t.stop)
	t.wg.Wait()
}

func (t *tables) refreshSoon() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *tables) minVersion() uint64 {
	var v uint64
	for i, s := range t.sites {
		if i == 0 || t.version(s) < v {
			v = t.version(s)
		}
	}
	return v
}

func (t *tables) loop() {
	defer t.wg.Done()
	tick := time.NewTicker(tablePoll)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		go func() {
			select {
			case <-t.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		var err error
		if t.hold == nil || !t.hold() {
			err = t.refresh(ctx)
		}
		cancel()
		if err != nil {
			t.log.Warn("generation table refresh failed; searching on the last known table", "err", err)
		}
		select {
		case <-t.stop:
			return
		case <-t.kick:
		case <-tick.C:
		}
	}
}

// refresh fetches what changed since the held versions, for every table
// site, and applies it.
func (t *tables) refresh(ctx context.Context) error {
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	return t.refreshLocked(ctx)
}

// barrierSince returns the head's own table version as a refresh that
// began after since left it: the table as the managers' leader held it at
// some moment after since. A refresh that began before since does not
// count, even if it ended after it (the leader may have answered before
// since). Nothing is fetched when a refresh that began after since already
// succeeded (another search's, the poll's); else one refresh now.
// Refreshes are serialised, so searches that wait here together share the
// first one that succeeds.
func (t *tables) barrierSince(ctx context.Context, since time.Time) (uint64, error) {
	t.refreshMu.Lock()
	defer t.refreshMu.Unlock()
	t.mu.RLock()
	ok, v := t.okStart.After(since), t.okVersion
	t.mu.RUnlock()
	if ok {
		return v, nil
	}
	if err := t.refreshLocked(ctx); err != nil {
		return 0, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.okVersion, nil
}

// bucketSince is the head's own table's entry of a bucket, with the table version from which the entries
// carry LeftAt (fsm.GenerationView.LeftAtFrom).
func (t *tables) bucketSince(id string) (info fsm.BucketInfo, known bool, leftAtFrom uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	info, known = t.own().Bucket(id)
	return info, known, t.own().LeftAtFrom()
}

func (t *tables) refreshLocked(ctx context.Context) error {
	start := time.Now()
	for i := range t.sites {
		t.mu.RLock()
		site := t.sites[i]
		t.mu.RUnlock()
		t.mu.RLock()
		since := t.version(site)
		if !t.loaded {
			since = 0
		}
		t.mu.RUnlock()
		v, err := t.fetch(ctx, site, since)
		if err != nil && bus.IsRemote(err, "bad_site") && site == t.sites[0] && site != fsm.DefaultSite && site != fsm.Site0 {
			// A single-site cluster has no table for the head's site: the
			// head follows the cluster's only site (and says so once).
			t.log.Warn("the cluster is single-site: this search head follows its default site's table", "configured_site", site)
			t.mu.Lock()
			t.fallBack()
			t.mu.Unlock()
			site = fsm.DefaultSite
			v, err = t.fetch(ctx, site, 0)
		}
		if err != nil {
			t.mu.Lock()
			t.stale, t.lastErr = true, err
			t.mu.Unlock()
			return err
		}
		t.apply(site, v)
	}
	t.mu.Lock()
	t.loaded, t.stale, t.lastErr, t.lastOK = true, false, nil, time.Now()
	t.okStart, t.okVersion = start, t.version(t.sites[0])
	t.mu.Unlock()
	return nil
}

// fallBack makes the default site the head's own table site. Until its
// table arrives the head keeps the generation, the peers and the buckets
// it held, with no primaries and no version held. t.mu held.
func (t *tables) fallBack() {
	was := t.own()
	t.sites[0] = fsm.DefaultSite
	t.bySite[fsm.DefaultSite] = t.newTable(fsm.DefaultSite)
	kept := fsm.GenerationView{Generation: was.Generation(), Full: true, Buckets: maps.Collect(was.Buckets())}
	for _, p := range was.Peers() {
		kept.Peers = append(kept.Peers, p)
	}
	t.bySite[fsm.DefaultSite].Apply(kept)
}

// apply takes one site's view (fsm.GenerationTable's delta rule). The
// generation, the peers and the bucket entries come from the head's own
// table site only (sites[0]): its chain of deltas is contiguous from its
// first whole table, so it alone keeps them current, and mixing in another
// site's view — fetched at another moment, perhaps from a lagging follower
// — could move them back. The other view (site0) gives its primaries only.
// Once the tables are loaded, a view older than the one held (a follower
// behind the manager answered before) is ignored; until then every view
// is a whole table (since 0) and replaces what is held.
func (t *tables) apply(site string, v fsm.GenerationView) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tb := t.bySite[site]
	if !t.loaded {
		tb = t.newTable(site)
		t.bySite[site] = tb
	}
	if held := tb.Version(); !tb.Apply(v) {
		t.log.Debug("generation table: ignoring a view older than the one held", "site", site, "view", v.Version, "held", held)
	}
}

// refreshNow refreshes the tables now, again until the head's own table
// reaches version atLeast (a peer named it; a follower that answered may
// lag behind) or ctx ends.
func (t *tables) refreshNow(ctx context.Context, atLeast uint64) error {
	for {
		err := t.refresh(ctx)
		t.mu.RLock()
		v := t.version(t.sites[0])
		t.mu.RUnlock()
		if err == nil && v >= atLeast {
			return nil
		}
		wait := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			wait.Stop()
			if err != nil {
				return err
			}
			return fmt.Errorf("generation table at version %d, a peer named %d: %w", v, atLeast, ctx.Err())
		case <-wait.C:
		}
	}
}

// peerServes reports whether the current table lets a peer serve
// searches (Up or Detention).
func (t *tables) peerServes(id string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	p, ok := t.own().Peer(id)
	return ok && servesSearches(p.State)
}

// tableSite is the site whose primaries the default plan uses: the head's
// site, or "default" in a single-site cluster.
func (t *tables) tableSite() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.sites[0]
}

// status is the table's freshness for a search's summary.
func (t *tables) status() (loaded, stale bool, lastOK time.Time, lastErr error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.loaded, t.stale, t.lastOK, t.lastErr
}
