package relay

import (
	"sync"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
)

// A class's load reports go upstream on one stream of the class, not one per
// client: the control plane holds one LRS stream per class as it holds one
// ADS stream per class (docs/architecture.md, "Load reports"). The class's
// loadHub is that stream's relay side. It passes the control plane's
// LoadStatsResponse (the clusters it wants, send_all_clusters, the
// interval) to every reporting client of the class, sums their reports
// into one window (lrs_agg.go), and has the upstream stream send the window
// once every client of the class reported in it (so a window holds one
// report of each client, as a control plane counting per stream expects),
// or one interval after its first report, whichever comes first.
//
// Locks: loadHubs.mu → loadHub.mu → loadStream.mu. The upstream stream
// calls the hub (LoadFeed) from its goroutine with no lock of the relay
// held; the hub never calls the upstream with its mu held.

// LoadUpstream opens a class's load-report stream to the control plane
// (upstream.Client, through the app).
type LoadUpstream interface {
	// ReportLoad starts the class's stream, fed by feed; sendAll: announce
	// that the class's clients honour send_all_clusters. stop sends the
	// last report, then half-closes the stream or, with abort, cancels it,
	// and returns once the stream is done.
	ReportLoad(class *shard.Class, sendAll bool, feed LoadFeed) (stop func(abort bool))
}

// LoadFeed is what a class's upstream load-report stream asks of the relay
// (upstream.LoadFeed).
type LoadFeed interface {
	LoadResponse(*lrsv3.LoadStatsResponse)
	LoadDue() <-chan struct{}
	CollectLoad() []*endpointv3.ClusterStats
	LoadRefused(err error)
}

// minLoadInterval floors the interval the relay waits for a window's last
// client (a control plane may ask for 0).
const minLoadInterval = time.Millisecond

// loadHubs are the classes' hubs. A hub lives while the class has a
// reporting client, and for LoadLimits.RefusalHold after its control plane
// refused load reports (new clients of the class are refused at once
// meanwhile).
type loadHubs struct {
	mu   sync.Mutex
	hubs map[*shard.Class]*loadHub // guarded by mu
}

// loadHub is one class's upstream load reporting.
type loadHub struct {
	// Read-only after creation.
	srv   *Server
	class *shard.Class
	due   chan struct{}    // cap 1: a window is due (LoadDue)
	stop  func(abort bool) // ends the upstream stream; set under loadHubs.mu before the hub is shared with a stream

	mu      sync.Mutex // guards everything below
	members map[*loadStream]struct{}
	// The control plane's latest answer, passed to every member; nil
	// before the first.
	resp     *lrsv3.LoadStatsResponse
	interval time.Duration       // resp's, at least minLoadInterval
	sendAll  bool                // resp's send_all_clusters
	wanted   map[string]struct{} // resp's clusters
	win      loadWindow          // the load since the last collect
	gen      uint64              // the window's number
	reported int                 // members that reported in window gen
	opened   bool                // a report arrived in window gen
	backstop *time.Timer         // the window's deadline, once opened
	since    time.Time           // the last collect (or the hub's start)
	refused  error               // the control plane's refusal, for good
	done     bool                // removed from loadHubs
}

// joinLoad adds st (classified) to its class's hub, which it makes, with
// the class's upstream stream, if the class has none; sendAll is whether
// st's node honours send_all_clusters (announced upstream when st makes
// the hub). It returns the control plane's refusal when the class's hub
// holds one.
func (s *Server) joinLoad(st *loadStream, sendAll bool) (*loadHub, error) {
	hs := &s.loads
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.hubs[st.class]
	if h == nil {
		if hs.hubs == nil {
			hs.hubs = map[*shard.Class]*loadHub{}
		}
		h = &loadHub{srv: s, class: st.class, due: make(chan struct{}, 1), members: map[*loadStream]struct{}{},
			win: newLoadWindow(s.opts.LoadLimits.MaxClassReportBytes), gen: 1, since: time.Now()}
		hs.hubs[st.class] = h
		h.stop = s.opts.LoadReports.ReportLoad(st.class, sendAll, h)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refused != nil {
		return nil, h.refused
	}
	h.members[st] = struct{}{}
	st.last = time.Now()
	if h.resp != nil {
		st.setRate(h.interval)
		st.offer(h.resp)
	}
	return h, nil
}

// leave removes st from the hub; the last member's leaving stops the
// class's upstream stream (after its last report), cancelling it if st was
// cancelled (aborted), half-closing it otherwise.
func (h *loadHub) leave(st *loadStream, aborted bool) {
	hs := &h.srv.loads
	hs.mu.Lock()
	h.mu.Lock()
	if _, ok := h.members[st]; !ok {
		h.mu.Unlock()
		hs.mu.Unlock()
		return
	}
	delete(h.members, st)
	if st.reportedGen == h.gen {
		h.reported--
	}
	last := len(h.members) == 0
	if last && h.refused == nil && !h.done {
		h.done = true
		delete(hs.hubs, h.class)
	}
	if !last && h.opened && h.reported >= len(h.members) {
		h.signalDue()
	}
	h.mu.Unlock()
	hs.mu.Unlock()
	if last {
		h.stop(aborted)
	}
}

// report merges st's report into the window (mu not held); the window is
// due once every member reported in it.
func (h *loadHub) report(st *loadStream, stats []*endpointv3.ClusterStats) {
	now := time.Now()
	var notRequested int
	h.mu.Lock()
	defer func() {
		h.mu.Unlock()
		h.srv.drops.AddN(drop.LoadNotRequested, notRequested)
	}()
	prev := st.last
	st.last = now
	kept := stats[:0:0]
	for _, cs := range stats {
		if !h.wantedLocked(cs.GetClusterName()) {
			notRequested += 1 + statsEntries(cs)
			continue
		}
		// The period the client's report covers: its own interval, or
		// the time since its previous report.
		start := prev
		if d := cs.GetLoadReportInterval(); d.IsValid() && d.AsDuration() > 0 {
			start = now.Add(-d.AsDuration())
		}
		h.win.add(cs, start, now, mergeCounts)
		kept = append(kept, cs)
	}
	st.gauges = gaugesOf(kept)
	if st.reportedGen != h.gen {
		st.reportedGen = h.gen
		h.reported++
	}
	if !h.opened {
		h.opened = true
		gen := h.gen
		h.backstop = time.AfterFunc(h.interval, func() {
			h.mu.Lock()
			if h.gen == gen {
				h.signalDue()
			}
			h.mu.Unlock()
		})
	}
	if h.reported >= len(h.members) {
		h.signalDue()
	}
}

// wantedLocked reports whether the control plane asked for cluster's load
// (mu held). Before it answered, it asked for none.
func (h *loadHub) wantedLocked(cluster string) bool {
	if h.sendAll {
		return true
	}
	_, ok := h.wanted[cluster]
	return ok
}

// signalDue tells the upstream stream a window is due (mu held).
func (h *loadHub) signalDue() {
	select {
	case h.due <- struct{}{}:
	default:
	}
}

// LoadResponse implements LoadFeed: the control plane's answer is passed to
// every member (unless it repeats the last), and sets which clusters the
// window takes and the members' report rates.
func (h *loadHub) LoadResponse(resp *lrsv3.LoadStatsResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resp != nil && proto.Equal(h.resp, resp) {
		return
	}
	h.resp = resp
	h.interval = max(resp.GetLoadReportingInterval().AsDuration(), minLoadInterval)
	h.sendAll = resp.GetSendAllClusters()
	h.wanted = make(map[string]struct{}, len(resp.GetClusters()))
	for _, c := range resp.GetClusters() {
		h.wanted[c] = struct{}{}
	}
	for st := range h.members {
		st.setRate(h.interval)
		st.offer(resp)
	}
}

// LoadDue implements LoadFeed.
func (h *loadHub) LoadDue() <-chan struct{} { return h.due }

// CollectLoad implements LoadFeed: the window, with each member's latest
// gauges, and a new window.
func (h *loadHub) CollectLoad() []*endpointv3.ClusterStats {
	now := time.Now()
	h.mu.Lock()
	for st := range h.members {
		for _, cs := range st.gauges {
			if h.wantedLocked(cs.GetClusterName()) {
				h.win.add(cs, time.Time{}, time.Time{}, mergeGauges)
			}
		}
	}
	out, refused := h.win.take(now, h.since)
	h.since = now
	h.gen++
	h.reported = 0
	h.opened = false
	if h.backstop != nil {
		h.backstop.Stop()
		h.backstop = nil
	}
	h.mu.Unlock()
	h.srv.drops.AddN(drop.LoadOverLimit, refused)
	return out
}

// LoadRefused implements LoadFeed: every member ends with err, and new
// streams of the class get it at once for LoadLimits.RefusalHold.
func (h *loadHub) LoadRefused(err error) {
	h.mu.Lock()
	h.refused = err
	members := make([]*loadStream, 0, len(h.members))
	for st := range h.members {
		members = append(members, st)
	}
	h.mu.Unlock()
	for _, st := range members {
		st.end(err)
	}
	time.AfterFunc(h.srv.opts.LoadLimits.RefusalHold, func() {
		hs := &h.srv.loads
		hs.mu.Lock()
		defer hs.mu.Unlock()
		if hs.hubs[h.class] == h {
			delete(hs.hubs, h.class)
		}
	})
}

// statsEntries counts a cluster's entries below it: localities, endpoints,
// load metrics and drop categories (what LoadLimits.MaxStatsPerReport
// bounds).
func statsEntries(cs *endpointv3.ClusterStats) int {
	n := len(cs.GetDroppedRequests()) + len(cs.GetUpstreamLocalityStats())
	for _, ls := range cs.GetUpstreamLocalityStats() {
		n += len(ls.GetLoadMetricStats()) + len(ls.GetUpstreamEndpointStats())
		for _, es := range ls.GetUpstreamEndpointStats() {
			n += len(es.GetLoadMetricStats())
		}
	}
	return n
}
