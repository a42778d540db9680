package peer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/api/mgrclient"
	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/peer/repl"
	"github.com/quarry-dev/quarry/peer/store"
)

// DefaultTargetTimeout is SPEC §4's target_timeout.
const DefaultTargetTimeout = 2 * time.Second

// cluster is a peer's cluster membership: its bus connection, control
// plane, replicator, replication service and heartbeat loop.
type cluster struct {
	nc     *nats.Conn
	cp     ControlPlane
	repl   *replicator
	fix    *fixupRunner
	svc    *bus.Service
	fixSvc *bus.Service
	search *searchService
	// keySvc answers other peers' idempotency key lookups; keyPeers asks
	// them (idemkeys.go).
	keySvcs  []*bus.Service
	keyPeers *keyPeers
	// svcDefault serves quarry.repl.default.<peer> too (single-site).
	svcDefault *bus.Service
	// sealWatch: hot replicas whose length a seal task asked for; once the
	// managers' table shows the bucket sealed (not hot), the replica is
	// made warm at its length (sealWatched).
	sealMu    sync.Mutex
	sealWatch map[string]bool
	// senders decides who may write to this peer's copies (replsender.go).
	senders *replSenders
	cfg     api.PeerConfig
	// tokens are the HEC tokens last handed to HEC (heartbeats only), as
	// hecTokensOf makes them.
	tokens []hec.Token
	// rules are the configuration bundle's index-time rules fetched at
	// start, handed to HEC when it is built (bundle.go).
	rules *knowledge.IndexRules
	// lastStatus is the managers' status (generation, table version,
	// config id) of the last heartbeat after which peers and config were
	// fetched (statusKnown); refreshOnChange fetches again when it moves.
	// Heartbeat goroutine only.
	lastStatus  api.Status
	statusKnown bool
	// peersFetches and configFetches count those fetches
	// (quarry_peer_control_fetches_total).
	peersFetches, configFetches atomic.Int64
	stop                        chan struct{}
	wg                          sync.WaitGroup
	closed                      sync.Once

	// dataSizes are the max_data_size roll sizes last handed to the store.
	dataSizes map[string]int64

	// auth is what the peer checks API tokens against (auth.go): the
	// cluster config's search tokens, the managers' admin token digest and
	// the cluster's token key they are keyed under, replaced together by
	// the heartbeats' config refresh.
	auth atomic.Pointer[clusterAuth]
}

// clusterAuth is a cluster member's token checks, from one config.
type clusterAuth struct {
	key          []byte
	adminDigest  string
	searchTokens []fsm.SearchToken
}

// authOf is the token checks of a peer config.
func authOf(cfg api.PeerConfig) *clusterAuth {
	return &clusterAuth{key: cfg.TokenKey, adminDigest: cfg.AdminTokenDigest, searchTokens: cfg.SearchTokens}
}

func (p *Peer) site() string {
	if p.cfg.Site == "" {
		return fsm.DefaultSite
	}
	return p.cfg.Site
}

func (p *Peer) register(ctx context.Context, cp ControlPlane) error {
	host, _ := os.Hostname()
	r := api.Register{Peer: p.cfg.ID, GUID: p.guid, Site: p.site(), Host: host, Attrs: p.cfg.Attrs, Inventory: []api.Copy{}, KeyedDigests: true}
	if p.ln != nil {
		r.HTTPAddr = p.ln.Addr().String()
	}
	for _, c := range p.store.Inventory() {
		if c.State == "removed" {
			continue
		}
		state := api.CopyWarm
		if c.State == "hot" || c.State == "rolling" {
			state = api.CopyHot
		}
		r.Inventory = append(r.Inventory, api.Copy{Bucket: c.ID, Index: c.Index, State: state, Searchable: c.Searchable,
			Events: int64(c.Events), Blocks: int64(c.Blocks), Bytes: c.JournalBytes, Earliest: c.Earliest, Latest: c.Latest,
			ContentHash: c.ContentHash, LastBlockChecksum: p.store.Replicas().LastChecksum(c.ID, c.Blocks), Corrupt: c.State == "corrupt"})
	}
	return cp.Register(ctx, r)
}

// joinCluster connects to the bus, registers with the managers (retrying
// until JoinTimeout), takes the cluster config, installs the replication
// hook and serves quarry.repl.<site>.<peer>. It returns the HEC tokens of
// the cluster config.
func (p *Peer) joinCluster() ([]hec.Token, error) {
	cfg := p.cfg
	ctx, cancel := context.WithTimeout(context.Background(), cfg.JoinTimeout)
	defer cancel()
	subj, err := bus.NewSubjects(cfg.SubjectPrefix)
	if err != nil {
		return nil, err
	}
	// The id is the sender token of everything this peer sends
	// (quarry.mgr.<op>.<id>, quarry.repl.<site>.<target>.<id>) and what the
	// managers validate it with.
	if err := fsm.ValidName("peer", cfg.ID); err != nil {
		return nil, fmt.Errorf("peer: --id: %w", err)
	}
	nc, err := bus.Connect(ctx, cfg.NATS, bus.ConnectOptions{Name: "peer " + cfg.ID, User: cfg.NATSUser, Password: cfg.NATSPassword, Logger: p.log, TLSCA: cfg.TLS.CA})
	if err != nil {
		return nil, fmt.Errorf("peer: connect to the bus: %w", err)
	}
	cl := &cluster{nc: nc, stop: make(chan struct{}), sealWatch: map[string]bool{}}
	cl.senders = &replSenders{p: p, cl: cl}
	cl.cp = cfg.ControlPlane
	if cl.cp == nil {
		cl.cp = NewNATSControlPlane(nc, subj, cfg.ID)
	}
	fail := func(err error) ([]hec.Token, error) {
		for _, svc := range cl.keySvcs {
			svc.Stop(context.Background())
		}
		nc.Close()
		return nil, err
	}
	retry := func(what string, f func(context.Context) error) error {
		for {
			cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
			err := f(cctx)
			ccancel()
			if err == nil {
				return nil
			}
			p.log.Warn("waiting for the managers", "what", what, "err", err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("peer: %s: %w", what, err)
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	if err := p.beforeRegister(ctx, cl, subj, retry); err != nil {
		return fail(err)
	}
	if err := retry("register", func(c context.Context) error { return p.register(c, cl.cp) }); err != nil {
		return fail(err)
	}
	if err := retry("cluster config", func(c context.Context) (err error) { cl.cfg, err = cl.cp.Config(c); return err }); err != nil {
		return fail(err)
	}
	if err := retry("configuration bundle", func(c context.Context) (err error) { cl.rules, err = p.fetchBundle(c, cl.cfg.BundleHash); return err }); err != nil {
		return fail(err)
	}
	var peers []fsm.PeerView
	if err := retry("peers", func(c context.Context) (err error) { peers, err = cl.cp.Peers(c); return err }); err != nil {
		return fail(err)
	}
	timeout := cfg.TargetTimeout
	if timeout <= 0 {
		timeout = DefaultTargetTimeout
	}
	cl.repl = newReplicator(p, nc, subj, cl.cp, timeout, minCopiesOf(cl.cfg))
	cl.repl.setTimeout(cl.cfg.TargetTimeout) // the managers' value wins when they push one
	cl.repl.setPeers(peers)
	cl.repl.setMaintenance(cl.cfg.Maintenance)
	p.store.Replicas().SetReplication(cl.repl)
	subject, err := subj.ReplTo(p.site(), cfg.ID)
	if err != nil {
		return fail(err)
	}
	serveRepl := func(ctx context.Context, req repl.Request) (repl.Reply, error) { return p.serveRepl(ctx, cl, req) }
	cl.svc, err = bus.Serve(nc, subject, bus.ServeOptions{MaxConcurrent: 16, Logger: p.log}, serveRepl)
	if err != nil {
		return fail(err)
	}
	if p.site() != fsm.DefaultSite {
		// A single-site cluster lists every peer under the default site in
		// its generation table, while targets and fixups name the site the
		// peer registered with: answer on both.
		dsub, err := subj.ReplTo(fsm.DefaultSite, cfg.ID)
		if err != nil {
			return fail(err)
		}
		if cl.svcDefault, err = bus.Serve(nc, dsub, bus.ServeOptions{MaxConcurrent: 16, Logger: p.log}, serveRepl); err != nil {
			cl.svc.Stop(context.Background())
			return fail(err)
		}
	}
	if err := p.startServices(cl, nc, subj); err != nil {
		cl.svc.Stop(context.Background())
		return fail(err)
	}
	p.cl = cl
	p.applyDataSizes(cl.cfg)
	p.applyRollLimits(cl.cfg)
	if p.store.LastRecovery().Rolled > 0 {
		cl.wg.Add(1)
		go p.finishRestartedBuckets()
	}
	cl.wg.Add(1)
	go cl.fix.loop(cl.stop, &cl.wg, fixupRetry(cfg))
	toks := hecTokensOf(cl.cfg)
	cl.tokens = toks
	cl.auth.Store(authOf(cl.cfg))
	p.log.Info("joined the cluster", "peers", len(peers), "min_copies", cl.repl.minCopies, "tokens", len(toks))
	return toks, nil
}

// startServices serves what the managers and other processes ask of a
// joined peer — fixup tasks, searches — stopping those it started when one
// fails (idempotency key lookups are served from before the registration,
// joinCluster).
func (p *Peer) startServices(cl *cluster, nc *nats.Conn, subj bus.Subjects) error {
	// The fixup runner exists before the fixup subject is served: a task
	// pushed at once goes straight to it.
	cl.fix = newFixupRunner(p, cl.cp, p.cfg.ReplicationRate)
	var err error
	cl.fixSvc, err = mgrclient.ServeFixups(nc, subj, p.site(), p.cfg.ID, bus.ServeOptions{MaxConcurrent: 8, Logger: p.log},
		func(ctx context.Context, t api.FixupTask) (api.FixupAck, error) { return p.acceptFixup(cl, t), nil })
	if err != nil {
		return err
	}
	if cl.search, err = p.startSearch(nc, subj); err != nil {
		cl.fixSvc.Stop(context.Background())
		return err
	}
	cl.keyPeers = &keyPeers{p: p, nc: nc, subj: subj}
	return nil
}

// refreshTokens reads the cluster config and hands HEC its tokens when they
// changed (SPEC §8: config changes reach running peers within seconds).
func (p *Peer) refreshTokens(ctx context.Context) bool {
	cfg, err := p.cl.cp.Config(ctx)
	if err != nil {
		return false
	}
	p.applyDataSizes(cfg)
	p.applyRollLimits(cfg)
	p.declareIndexes(cfg)
	p.cl.repl.setMaintenance(cfg.Maintenance)
	if p.cl.repl.setTimeout(cfg.TargetTimeout) {
		p.log.Info("target_timeout from the cluster config", "target_timeout", cfg.TargetTimeout)
	}
	if old, next := p.cl.auth.Load(), authOf(cfg); old == nil || !reflect.DeepEqual(old, next) {
		p.cl.auth.Store(next)
		if old == nil || !reflect.DeepEqual(old.searchTokens, next.searchTokens) {
			p.log.Info("search tokens updated from the cluster config", "tokens", len(cfg.SearchTokens))
		}
		if old != nil && len(old.key) == 0 && len(next.key) > 0 {
			p.log.Info("the cluster's token key arrived: tokens are checked against keyed digests")
		}
	}
	if !p.refreshBundle(ctx, cfg.BundleHash) {
		return false
	}
	toks := hecTokensOf(cfg)
	if reflect.DeepEqual(toks, p.cl.tokens) {
		return true
	}
	p.hec.SetTokens(toks)
	p.cl.tokens = toks
	p.log.Info("hec tokens updated from the cluster config", "tokens", len(toks))
	return true
}

// heartbeats beats every heartbeat_period, re-registers (with the
// inventory) when the managers ask, and refreshes the peer list the
// replicator picks replacement targets from.
func (p *Peer) heartbeats() {
	cl := p.cl
	defer cl.wg.Done()
	period := cl.cfg.HeartbeatPeriod
	if period <= 0 {
		period = time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	rolled := false // hot buckets rolled for a registration not yet done
	for n := 0; ; n++ {
		select {
		case <-cl.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), period)
		state, status, err := p.heartbeat(ctx)
		clean := err == nil // a plain beat: its status says what changed
		if err == nil {
			p.setDetained(state == fsm.StateDetention)
		}
		if (err == nil || errors.Is(err, ErrRegisterFirst)) && p.offline(state) {
			cancel()
			return
		}
		if errors.Is(err, ErrRegisterFirst) && state == fsm.StateDecommissioning {
			// Registering again would make a leaving peer Up: it stays
			// Decommissioning until the managers remove it.
			err = nil
		} else if errors.Is(err, ErrRegisterFirst) {
			if !rolled {
				// Declared Down and back without a restart (a cut network, a
				// paused process): the managers may have sealed this peer's
				// hot buckets from the copies they could reach meanwhile, and
				// an origin that went on appending to a sealed bucket would
				// write past the sealed length, where the next truncate cuts
				// acknowledged events. So it rolls them, as a restart does
				// (SPEC §2), before it registers; new events open new hot
				// buckets with targets the managers choose now.
				p.log.Info("managers ask for a registration; rolling this peer's hot buckets, then registering with the inventory")
				p.store.RollAll()
				rolled = true
			}
			if err = p.register(ctx, cl.cp); err == nil {
				rolled = false
			}
		}
		if err != nil {
			p.log.Warn("heartbeat", "err", err)
		}
		p.refreshOnChange(ctx, status, clean, n)
		p.sealWatched(ctx)
		cancel()
	}
}

// controlBackstop is how many heartbeats may pass without a peers or
// config fetch while the managers' status says nothing changed: a backstop
// against a change the status does not cover, not the way changes arrive.
const controlBackstop = 60

// refreshOnChange fetches the peer list (the replicator's replacement
// targets) when the generation or the table version the heartbeat reply
// names moved, and the cluster config when its id moved — not every
// heartbeat: that was three leader requests per peer per second, 900/s at
// 300 peers (issue 30). Anything unknown (a failed heartbeat, a
// registration) fetches both; so does every controlBackstop-th beat.
func (p *Peer) refreshOnChange(ctx context.Context, st api.Status, known bool, n int) {
	cl := p.cl
	last := cl.lastStatus
	backstop := n%controlBackstop == 0
	if !known || backstop || !cl.statusKnown || st.Generation != last.Generation || st.TableVersion != last.TableVersion {
		if peers, err := cl.cp.Peers(ctx); err == nil {
			cl.repl.setPeers(peers)
			cl.peersFetches.Add(1)
		} else {
			known = false
		}
	}
	if !known || backstop || !cl.statusKnown || st.ConfigID != last.ConfigID {
		if p.refreshTokens(ctx) {
			cl.configFetches.Add(1)
		} else {
			known = false
		}
	}
	// Only a fully fetched status is remembered: a failed fetch is tried
	// again on the next beat.
	cl.lastStatus, cl.statusKnown = st, known
}

// heartbeat sends one heartbeat with this peer's GUID (the managers check
// it against the registered one) and light stats; it returns the peer's
// state in the managers' table, with ErrRegisterFirst when they want a
// fresh registration.
func (p *Peer) heartbeat(ctx context.Context) (fsm.PeerState, api.Status, error) {
	rep, err := p.cl.cp.Heartbeat(ctx, api.Heartbeat{V: api.WireVersion, Peer: p.cfg.ID, GUID: p.guid, Stats: p.heartbeatStats()})
	if err != nil {
		return "", api.Status{}, err
	}
	if rep.Reregister {
		return rep.State, rep.Status, ErrRegisterFirst
	}
	if s := p.cl.search; s != nil {
		s.heard(rep.TableVersion)
	}
	return rep.State, rep.Status, nil
}

// closeCluster stops the heartbeats, the replication service and the
// replicator, then the bus connection. abrupt skips draining: the
// connection goes first, as when the process dies.
func (p *Peer) closeCluster(abrupt bool) {
	cl := p.cl
	if cl == nil {
		return
	}
	cl.closed.Do(func() {
		if abrupt {
			cl.nc.Close()
		}
		close(cl.stop)
		cl.wg.Wait()
		if cl.search != nil {
			drain := searchDrain
			if abrupt {
				drain = 0
			}
			cl.search.close(drain)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cl.svc.Stop(ctx)
		if cl.fixSvc != nil {
			cl.fixSvc.Stop(ctx)
		}
		for _, svc := range cl.keySvcs {
			svc.Stop(ctx)
		}
		if cl.svcDefault != nil {
			cl.svcDefault.Stop(ctx)
		}
		cancel()
		cl.repl.close()
		cl.nc.Close()
	})
}

var _ = strconv.Itoa

// Kill stops the peer abruptly, as a crash would for its peers: the bus
// connection and the HTTP listener go first, with no goodbye to anyone;
// then the store is closed so the process can reopen its data dir (what a
// crash leaves on disk beyond that is covered by peer/crash_test.go).
func (p *Peer) Kill() error {
	p.srv.Close()
	p.stopSweeper()
	p.closeCluster(true)
	return p.store.Close()
}

// TargetTimeout is the target_timeout the peer's replicator uses (its own
// flag until the managers push one; 0 for a standalone peer).
func (p *Peer) TargetTimeout() time.Duration {
	if p.cl == nil {
		return 0
	}
	return p.cl.repl.targetTimeout()
}

// MaintenanceMode reports whether the peer's replicator runs in
// maintenance mode (false, with an error, for a standalone peer).
func (p *Peer) MaintenanceMode() (bool, error) {
	if p.cl == nil {
		return false, errors.New("standalone peer")
	}
	return p.cl.repl.maintenance.Load(), nil
}

// fixupRetry is how long a pushed task that could not run yet waits before
// it is tried again (tasks run as they are pushed; this is no poll of the
// managers).
func fixupRetry(cfg Config) time.Duration {
	if cfg.FixupRetry > 0 {
		return cfg.FixupRetry
	}
	return 500 * time.Millisecond
}

// finishRestartedBuckets: a bucket rolls when its origin restarts (SPEC §2).
// The store rolled this peer's hot buckets at open; their targets still
// hold hot replicas. For every bucket this restart rolled that the
// managers list with this peer as origin (hot, or already rolled by this
// peer's registration: fsm's RegisterPeer rolls a hot bucket its origin
// holds warm), each other copy gets the blocks it lacks and the roll, so
// all copies end warm at the origin's length. Retried until every such
// bucket is done or the peer stops.
func (p *Peer) finishRestartedBuckets() {
	cl := p.cl
	defer cl.wg.Done()
	ids := p.store.LastRecovery().RolledIDs
	rolled := map[string]bool{}
	for _, id := range ids {
		rolled[id] = true
	}
	done := map[string]bool{}
	for attempt := 0; ; attempt++ {
		// Over NATS (mgr.buckets): the managers' records of the buckets
		// this restart rolled, asked by id in bounded requests.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		views, err := cl.cp.Buckets(ctx, ids)
		cancel()
		pending := 0
		if err == nil {
			for _, v := range views {
				if v.Origin != p.cfg.ID || !rolled[v.ID] || done[v.ID] {
					continue
				}
				if _, state, ok := p.store.Replicas().Blocks(v.ID); !ok || state != "warm" {
					continue
				}
				ok := true
				for _, c := range v.Copies {
					if c.Peer == p.cfg.ID {
						continue
					}
					if _, err := cl.fix.pushCopy(0, v.ID, c.Peer, c.Searchable, -1, &cl.fix.catchupBytes, cl.stop); err != nil {
						p.log.Warn("could not roll a restarted bucket's replica", "bucket", v.ID, "target", c.Peer, "err", err)
						ok = false
					}
				}
				if ok && v.Hot {
					ok = p.reportEmptyRoll(v.ID)
				}
				if ok {
					done[v.ID] = true
					p.log.Info("restarted bucket rolled on its replicas", "bucket", v.ID)
				} else {
					pending++
				}
			}
		}
		if err == nil && pending == 0 {
			return
		}
		select {
		case <-cl.stop:
			return
		case <-time.After(time.Second):
		}
		if attempt > 600 {
			return
		}
	}
}

// reportEmptyRoll reports the roll of a restarted bucket the managers
// still hold hot although this peer holds it warm: the restart check cut
// it to no block (idemrestart.go), and a registration rolls a hot bucket
// its origin holds warm only at a length (blocks > 0). It reports whether
// the bucket is done (a refusal: the managers rolled or sealed it
// meanwhile).
func (p *Peer) reportEmptyRoll(id string) bool {
	if n, _, ok := p.store.Replicas().Blocks(id); !ok || n > 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := p.cl.cp.BucketEvent(ctx, api.BucketEvent{V: api.WireVersion, Kind: api.EventRolled, Bucket: id, Peer: p.cfg.ID})
	var remote *bus.RemoteError
	switch {
	case err == nil:
		p.log.Info("restarted bucket cut to no block reported rolled", "bucket", id)
	case errors.As(err, &remote) && remote.Code != api.CodeNotLeader:
		p.log.Warn("the managers refused the roll of a restarted bucket cut to no block", "bucket", id, "err", err)
	default:
		p.log.Warn("could not report the roll of a restarted bucket cut to no block", "bucket", id, "err", err)
		return false
	}
	return true
}

// acceptFixup answers a pushed fixup task at once: a seal task with this
// peer's length of the bucket (the managers seal at the longest), any other
// task queued for the fixup runner.
func (p *Peer) acceptFixup(cl *cluster, t api.FixupTask) api.FixupAck {
	if err := validTaskIDs(t); err != nil {
		// Ids from the network are checked where they arrive: a task
		// naming a path, not a bucket, is refused and nothing is queued.
		p.log.Warn("fixup task refused: invalid id", "task", t.ID, "kind", t.Kind, "err", err)
		return api.FixupAck{Reason: err.Error()}
	}
	if t.Kind == fsm.TaskSeal {
		// Hold the copy first: it takes no more blocks from its origin,
		// so the length read below is the length it keeps until the seal
		// lands (store.HoldForSeal: a block landing after the answer could
		// be acknowledged and then cut by a final seal).
		p.store.Replicas().HoldForSeal(t.Bucket)
		for _, c := range p.store.Inventory() {
			if c.ID == t.Bucket && c.State != string(store.StateCorrupt) {
				// (A corrupt copy answers as none: the seal is taken from
				// the copies that can serve it.)
				if c.State == string(store.StateHot) {
					cl.sealMu.Lock()
					cl.sealWatch[c.ID] = true
					cl.sealMu.Unlock()
				}
				return api.FixupAck{Accepted: true, Blocks: int64(c.Blocks), LastBlockChecksum: p.store.Replicas().LastChecksum(c.ID, c.Blocks),
					Earliest: c.Earliest, Latest: c.Latest, Bytes: c.JournalBytes, Events: int64(c.Events)}
			}
		}
		return api.FixupAck{Accepted: true} // no copy: length 0
	}
	cl.fix.submit(t)
	return api.FixupAck{Accepted: true}
}

// validTaskIDs checks a fixup task's ids with fsm's validator.
func validTaskIDs(t api.FixupTask) error {
	index, _, _, err := fsm.ValidBucketID(t.Bucket)
	if err != nil {
		return fmt.Errorf("fixup task %d: %w", t.ID, err)
	}
	if t.Index != "" && t.Index != index {
		return fmt.Errorf("fixup task %d: index %q, bucket %s", t.ID, t.Index, t.Bucket)
	}
	for _, n := range [][2]string{{"source", t.Source}, {"target", t.Target}, {"to", t.To}, {"site", t.SourceSite}, {"site", t.TargetSite}} {
		if n[1] == "" {
			continue
		}
		if err := fsm.ValidName(n[0], n[1]); err != nil {
			return fmt.Errorf("fixup task %d: %w", t.ID, err)
		}
	}
	return nil
}

// sealWatched makes warm every watched hot replica whose bucket the
// managers no longer list as hot (it was sealed), at the length it holds,
// and reports that length. Nothing is cut: a copy shorter or longer than
// the sealed length gets a fetch or a truncate task from the managers,
// which work on warm copies too.
func (p *Peer) sealWatched(ctx context.Context) {
	cl := p.cl
	cl.sealMu.Lock()
	ids := make([]string, 0, len(cl.sealWatch))
	for id := range cl.sealWatch {
		ids = append(ids, id)
	}
	cl.sealMu.Unlock()
	if len(ids) == 0 {
		return
	}
	sort.Strings(ids)
	views, err := cl.cp.Buckets(ctx, ids)
	if err != nil {
		return
	}
	hot := map[string]bool{}
	for _, v := range views {
		hot[v.ID] = v.Hot
	}
	for _, id := range ids {
		if hot[id] {
			continue
		}
		n, state, ok := p.store.Replicas().Blocks(id)
		if ok && state == "hot" {
			if err := p.store.Replicas().ReplicaRoll(id, n); err != nil {
				p.log.Warn("could not make a sealed replica warm", "bucket", id, "err", err)
				continue
			}
			cl.fix.reportLength(id, p.cfg.ID, n, p.store.Replicas().LastChecksum(id, n))
			p.log.Info("sealed replica made warm", "bucket", id, "blocks", n)
		}
		cl.sealMu.Lock()
		delete(cl.sealWatch, id)
		cl.sealMu.Unlock()
	}
}

// TakenOffline is closed when the managers took the peer offline
// (`quarry peer offline`): Restarting after its primaries moved, Removed
// once a decommission (--enforce-counts) completed, GracefulShutdown. The
// peer has stopped serving HTTP; its owner calls Close.
func (p *Peer) TakenOffline() <-chan struct{} { return p.offlineCh }

// offline acts on the peer's state in the managers' table: a
// Decommissioning peer rolls its hot buckets once (the decommission waits
// until it originates none) and keeps serving fixups; a peer that is
// Restarting, GracefulShutdown or Removed stops: its HTTP server and
// TakenOffline is closed. It reports
// whether the heartbeat loop should end.
func (p *Peer) offline(state fsm.PeerState) bool {
	switch state {
	case fsm.StateDecommissioning:
		if !p.decommissioning {
			p.decommissioning = true
			p.log.Info("decommissioning: rolling hot buckets; staying until the managers remove this peer")
			p.store.RollAll()
		}
	case fsm.StateRestarting, fsm.StateGracefulShutdown, fsm.StateRemoved:
		p.log.Info("taken offline by the managers; stopping", "state", state)
		p.offlineOnce.Do(func() {
			close(p.offlineCh)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				p.srv.Shutdown(ctx)
			}()
		})
		return true
	}
	return false
}

// heartbeatStats are the light statistics a heartbeat carries: the bytes of
// this peer's copies, the free space of its data directory's file system,
// its hot buckets (with the events of those it is the origin of) and the
// replication lag per target.
func (p *Peer) heartbeatStats() api.PeerStats {
	inv := p.store.Inventory()
	st := api.PeerStats{Copies: len(inv), Bundle: p.hec.IndexRulesHash()}
	st.DiskFree, st.DiskTotal = p.diskSpace()
	for _, c := range inv {
		st.Bytes += c.JournalBytes + c.IndexBytes
		if c.State != string(store.StateHot) {
			continue
		}
		st.HotBuckets++
		if strings.HasSuffix(c.ID, "~"+p.guid) && len(st.HotEvents) < api.MaxHotEventsReported {
			if st.HotEvents == nil {
				st.HotEvents = map[string]int64{}
			}
			st.HotEvents[c.ID] = int64(c.Events)
		}
	}
	if p.cl != nil && p.cl.repl != nil {
		st.ReplicationLag = p.cl.repl.lagBlocks()
	}
	return st
}

// diskSpace is the space left to unprivileged users on dir's file system
// and its size (0, 0 when it cannot be read).
func diskSpace(dir string) (free, total int64) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, 0
	}
	return int64(fs.Bavail) * int64(fs.Bsize), int64(fs.Blocks) * int64(fs.Bsize)
}
