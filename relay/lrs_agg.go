package relay

import (
	"cmp"
	"math"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// A class's load window: the load its clients reported since the class's
// last upstream report, summed. LRS stats are of two kinds:
//   - counts over the client's interval (requests issued, succeeded,
//     failed, dropped, new and failed connections, load metrics): summed
//     over every report of every client;
//   - gauges at the time of the report (requests in progress, active
//     connections): each client's latest report counts, once, whenever it
//     reported (loadStream.gauges), and the clients' values are summed.
// Entries are keyed as the protocol keys them: a cluster by name and EDS
// service name, a locality by region, zone, sub-zone and priority, an
// endpoint by its address, a load metric by name, a drop by category.

// loadWindow is one class's load since its last report. Guarded by its
// hub's mu.
type loadWindow struct {
	maxBytes int // the estimated encoded size it may reach (LoadLimits.MaxClassReportBytes)
	bytes    int // its estimated encoded size
	clusters map[clusterKey]*clusterLoad
	refused  int // entries refused for maxBytes since the last take
}

type clusterKey struct{ name, service string }

type clusterLoad struct {
	// The period the reports of its counts cover: from the earliest start
	// of one (its time less its load_report_interval) to the latest (both
	// zero: gauges only).
	start, end time.Time
	dropped    uint64
	drops      map[string]uint64
	localities map[localityKey]*localityLoad
}

type localityKey struct {
	region, zone, subZone string
	priority              uint32
}

// requestLoad is the request stats of a locality or an endpoint.
type requestLoad struct {
	succeeded, inProgress, errors, issued uint64
}

type localityLoad struct {
	locality                   *corev3.Locality
	req                        requestLoad
	active, newConns, failConn uint64
	cpu, mem, app              *metricLoad // nil: not reported
	metrics                    map[string]*metricLoad
	endpoints                  map[string]*endpointLoad // by encoded address
}

type metricLoad struct {
	n     uint64
	total float64
}

type endpointLoad struct {
	address  *corev3.Address
	metadata *structpb.Struct // the first reported
	req      requestLoad
	metrics  map[string]*metricLoad
}

// Estimated encoded sizes of the entries, beyond their strings: tags,
// lengths, the numbers (varints of up to 10 bytes).
const (
	clusterEntryBytes  = 40
	localityEntryBytes = 80
	endpointEntryBytes = 56
	metricEntryBytes   = 24
	dropEntryBytes     = 16
)

// mergeMode says which stats of a report a merge takes.
type mergeMode uint8

const (
	mergeCounts mergeMode = iota // counts only
	mergeGauges                  // gauges only
)

func newLoadWindow(maxBytes int) loadWindow {
	return loadWindow{maxBytes: maxBytes, clusters: map[clusterKey]*clusterLoad{}}
}

// room takes n estimated bytes for a new entry, or counts it refused.
func (w *loadWindow) room(n int) bool {
	if w.bytes+n > w.maxBytes {
		w.refused++
		return false
	}
	w.bytes += n
	return true
}

// add merges cs into the window; start and end are the period its counts
// cover (mergeCounts).
func (w *loadWindow) add(cs *endpointv3.ClusterStats, start, end time.Time, mode mergeMode) {
	k := clusterKey{cs.GetClusterName(), cs.GetClusterServiceName()}
	c := w.clusters[k]
	if c == nil {
		if !w.room(clusterEntryBytes + len(k.name) + len(k.service)) {
			return
		}
		c = &clusterLoad{drops: map[string]uint64{}, localities: map[localityKey]*localityLoad{}}
		w.clusters[k] = c
	}
	if mode == mergeCounts {
		if c.start.IsZero() || start.Before(c.start) {
			c.start = start
		}
		if end.After(c.end) {
			c.end = end
		}
		c.dropped = addSat(c.dropped, cs.GetTotalDroppedRequests())
		for _, d := range cs.GetDroppedRequests() {
			if _, ok := c.drops[d.GetCategory()]; !ok && !w.room(dropEntryBytes+len(d.GetCategory())) {
				continue
			}
			c.drops[d.GetCategory()] = addSat(c.drops[d.GetCategory()], d.GetDroppedCount())
		}
	}
	for _, ls := range cs.GetUpstreamLocalityStats() {
		w.addLocality(c, ls, mode)
	}
}

func (w *loadWindow) addLocality(c *clusterLoad, ls *endpointv3.UpstreamLocalityStats, mode mergeMode) {
	loc := ls.GetLocality()
	k := localityKey{loc.GetRegion(), loc.GetZone(), loc.GetSubZone(), ls.GetPriority()}
	l := c.localities[k]
	if l == nil {
		if !w.room(localityEntryBytes + len(k.region) + len(k.zone) + len(k.subZone)) {
			return
		}
		l = &localityLoad{locality: &corev3.Locality{Region: k.region, Zone: k.zone, SubZone: k.subZone},
			metrics: map[string]*metricLoad{}, endpoints: map[string]*endpointLoad{}}
		c.localities[k] = l
	}
	if mode == mergeGauges {
		l.req.inProgress = addSat(l.req.inProgress, ls.GetTotalRequestsInProgress())
		l.active = addSat(l.active, ls.GetTotalActiveConnections())
	} else {
		l.req.succeeded = addSat(l.req.succeeded, ls.GetTotalSuccessfulRequests())
		l.req.errors = addSat(l.req.errors, ls.GetTotalErrorRequests())
		l.req.issued = addSat(l.req.issued, ls.GetTotalIssuedRequests())
		l.newConns = addSat(l.newConns, ls.GetTotalNewConnections())
		l.failConn = addSat(l.failConn, ls.GetTotalFailConnections())
		l.cpu = addUnnamed(l.cpu, ls.GetCpuUtilization())
		l.mem = addUnnamed(l.mem, ls.GetMemUtilization())
		l.app = addUnnamed(l.app, ls.GetApplicationUtilization())
		w.addMetrics(l.metrics, ls.GetLoadMetricStats())
	}
	for _, es := range ls.GetUpstreamEndpointStats() {
		w.addEndpoint(l, es, mode)
	}
}

func (w *loadWindow) addEndpoint(l *localityLoad, es *endpointv3.UpstreamEndpointStats, mode mergeMode) {
	key := addressKey(es.GetAddress())
	e := l.endpoints[key]
	if e == nil {
		if !w.room(endpointEntryBytes + len(key) + proto.Size(es.GetMetadata())) {
			return
		}
		e = &endpointLoad{address: es.GetAddress(), metadata: es.GetMetadata(), metrics: map[string]*metricLoad{}}
		l.endpoints[key] = e
	}
	if mode == mergeGauges {
		e.req.inProgress = addSat(e.req.inProgress, es.GetTotalRequestsInProgress())
		return
	}
	e.req.succeeded = addSat(e.req.succeeded, es.GetTotalSuccessfulRequests())
	e.req.errors = addSat(e.req.errors, es.GetTotalErrorRequests())
	e.req.issued = addSat(e.req.issued, es.GetTotalIssuedRequests())
	w.addMetrics(e.metrics, es.GetLoadMetricStats())
}

func (w *loadWindow) addMetrics(into map[string]*metricLoad, ms []*endpointv3.EndpointLoadMetricStats) {
	for _, m := range ms {
		v := into[m.GetMetricName()]
		if v == nil {
			if !w.room(metricEntryBytes + len(m.GetMetricName())) {
				continue
			}
			v = &metricLoad{}
			into[m.GetMetricName()] = v
		}
		v.n = addSat(v.n, m.GetNumRequestsFinishedWithMetric())
		v.total += m.GetTotalMetricValue()
	}
}

func addUnnamed(into *metricLoad, m *endpointv3.UnnamedEndpointLoadMetricStats) *metricLoad {
	if m == nil {
		return into
	}
	if into == nil {
		into = &metricLoad{}
	}
	into.n = addSat(into.n, m.GetNumRequestsFinishedWithMetric())
	into.total += m.GetTotalMetricValue()
	return into
}

// addressKey is an endpoint's key: its address, encoded deterministically.
func addressKey(a *corev3.Address) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	return string(b)
}

// addSat is a+b, saturated: a client's counts are no reason to wrap.
func addSat(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// take returns the window as cluster stats in a stable order (clusters,
// localities, endpoints, metrics and drops sorted), each cluster's
// load_report_interval the period its reports cover (since to now for a
// cluster of gauges only: the time since the last take), and empties the
// window. refused is the entries the window refused for its size since the
// last take.
func (w *loadWindow) take(now, since time.Time) (out []*endpointv3.ClusterStats, refused int) {
	keys := make([]clusterKey, 0, len(w.clusters))
	for k := range w.clusters {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b clusterKey) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.service, b.service))
	})
	out = make([]*endpointv3.ClusterStats, 0, len(keys))
	for _, k := range keys {
		c := w.clusters[k]
		start, end := c.start, c.end
		if start.IsZero() {
			start, end = since, now
		}
		cs := &endpointv3.ClusterStats{
			ClusterName:          k.name,
			ClusterServiceName:   k.service,
			TotalDroppedRequests: c.dropped,
			LoadReportInterval:   durationpb.New(max(end.Sub(start), 0)),
		}
		for _, cat := range sortedKeys(c.drops) {
			cs.DroppedRequests = append(cs.DroppedRequests, &endpointv3.ClusterStats_DroppedRequests{Category: cat, DroppedCount: c.drops[cat]})
		}
		lkeys := make([]localityKey, 0, len(c.localities))
		for lk := range c.localities {
			lkeys = append(lkeys, lk)
		}
		slices.SortFunc(lkeys, func(a, b localityKey) int {
			return cmp.Or(cmp.Compare(a.region, b.region), cmp.Compare(a.zone, b.zone), cmp.Compare(a.subZone, b.subZone), cmp.Compare(a.priority, b.priority))
		})
		for _, lk := range lkeys {
			cs.UpstreamLocalityStats = append(cs.UpstreamLocalityStats, c.localities[lk].stats(lk.priority))
		}
		out = append(out, cs)
	}
	refused = w.refused
	*w = newLoadWindow(w.maxBytes)
	return out, refused
}

func (l *localityLoad) stats(priority uint32) *endpointv3.UpstreamLocalityStats {
	ls := &endpointv3.UpstreamLocalityStats{
		Locality:                l.locality,
		TotalSuccessfulRequests: l.req.succeeded,
		TotalRequestsInProgress: l.req.inProgress,
		TotalErrorRequests:      l.req.errors,
		TotalIssuedRequests:     l.req.issued,
		TotalActiveConnections:  l.active,
		TotalNewConnections:     l.newConns,
		TotalFailConnections:    l.failConn,
		CpuUtilization:          l.cpu.unnamed(),
		MemUtilization:          l.mem.unnamed(),
		ApplicationUtilization:  l.app.unnamed(),
		LoadMetricStats:         metricStats(l.metrics),
		Priority:                priority,
	}
	for _, k := range sortedKeys(l.endpoints) {
		e := l.endpoints[k]
		ls.UpstreamEndpointStats = append(ls.UpstreamEndpointStats, &endpointv3.UpstreamEndpointStats{
			Address:                 e.address,
			Metadata:                e.metadata,
			TotalSuccessfulRequests: e.req.succeeded,
			TotalRequestsInProgress: e.req.inProgress,
			TotalErrorRequests:      e.req.errors,
			TotalIssuedRequests:     e.req.issued,
			LoadMetricStats:         metricStats(e.metrics),
		})
	}
	return ls
}

func (m *metricLoad) unnamed() *endpointv3.UnnamedEndpointLoadMetricStats {
	if m == nil {
		return nil
	}
	return &endpointv3.UnnamedEndpointLoadMetricStats{NumRequestsFinishedWithMetric: m.n, TotalMetricValue: m.total}
}

func metricStats(ms map[string]*metricLoad) []*endpointv3.EndpointLoadMetricStats {
	var out []*endpointv3.EndpointLoadMetricStats
	for _, name := range sortedKeys(ms) {
		out = append(out, &endpointv3.EndpointLoadMetricStats{MetricName: name, NumRequestsFinishedWithMetric: ms[name].n, TotalMetricValue: ms[name].total})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// gaugesOf is the gauges of stats (requests in progress, active
// connections), the rest left out; nil when every gauge is zero. A
// stream keeps its latest report's until it reports again.
func gaugesOf(stats []*endpointv3.ClusterStats) []*endpointv3.ClusterStats {
	var out []*endpointv3.ClusterStats
	for _, cs := range stats {
		var locs []*endpointv3.UpstreamLocalityStats
		for _, ls := range cs.GetUpstreamLocalityStats() {
			var eps []*endpointv3.UpstreamEndpointStats
			for _, es := range ls.GetUpstreamEndpointStats() {
				if es.GetTotalRequestsInProgress() > 0 {
					eps = append(eps, &endpointv3.UpstreamEndpointStats{Address: es.GetAddress(), Metadata: es.GetMetadata(), TotalRequestsInProgress: es.GetTotalRequestsInProgress()})
				}
			}
			if ls.GetTotalRequestsInProgress() > 0 || ls.GetTotalActiveConnections() > 0 || len(eps) > 0 {
				locs = append(locs, &endpointv3.UpstreamLocalityStats{Locality: ls.GetLocality(), Priority: ls.GetPriority(),
					TotalRequestsInProgress: ls.GetTotalRequestsInProgress(), TotalActiveConnections: ls.GetTotalActiveConnections(), UpstreamEndpointStats: eps})
			}
		}
		if len(locs) > 0 {
			out = append(out, &endpointv3.ClusterStats{ClusterName: cs.GetClusterName(), ClusterServiceName: cs.GetClusterServiceName(), UpstreamLocalityStats: locs})
		}
	}
	return out
}
