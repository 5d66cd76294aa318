package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// seriesKey is what a line in a figure against N stands for: everything that
// describes a run except N.
type seriesKey struct {
	Target, Cache     string
	UpstreamDelta     bool // the relay's upstream spoke delta
	Delta             bool
	Service           string
	Clusters, Classes int
	StreamsPerConn    int
	Unique            float64 // 1 − overlap
	Pace              time.Duration
}

// scenario is what the relay is compared at: a series key without the
// target and cache, plus N. A baseline's scenario never has UpstreamDelta
// (it has no upstream): see baselineOf.
type scenario struct {
	UpstreamDelta           bool
	Delta                   bool
	Service                 string
	Clusters, Classes       int
	StreamsPerConn, Clients int
	Unique                  float64
	Pace                    time.Duration
}

func keyOf(r Run) seriesKey {
	return seriesKey{
		Target: r.Target, Cache: r.Cache, UpstreamDelta: r.UpstreamDelta, Delta: r.Delta, Service: r.Service,
		Clusters: r.Clusters, Classes: r.Classes, StreamsPerConn: r.StreamsPerConn, Unique: r.Unique, Pace: r.Pace,
	}
}

// scenario is k's scenario at n clients.
func (k seriesKey) scenario(n int) scenario {
	return scenario{
		UpstreamDelta: k.UpstreamDelta, Delta: k.Delta, Service: k.Service, Clusters: k.Clusters, Classes: k.Classes,
		StreamsPerConn: k.StreamsPerConn, Clients: n, Unique: k.Unique, Pace: k.Pace,
	}
}

func scenarioOf(r Run) scenario { return keyOf(r).scenario(r.Clients) }

// baselineOf is the scenario a baseline is measured at for the relay's
// s: the same, but for the relay's upstream protocol, which the baselines
// do not have.
func baselineOf(s scenario) scenario {
	s.UpstreamDelta = false
	return s
}

// targetRank orders targets: the relay first, then its bounds, then what
// users run without it.
func targetRank(t string) int {
	switch t {
	case "relay":
		return 0
	case "limit":
		return 1
	case "tcp":
		return 2
	case "direct":
		return 3
	}
	return 4
}

func compareKeys(a, b seriesKey) int {
	return cmp.Or(
		cmp.Compare(targetRank(a.Target), targetRank(b.Target)),
		strings.Compare(a.Target, b.Target),
		strings.Compare(a.Cache, b.Cache),
		compareBool(a.UpstreamDelta, b.UpstreamDelta),
		compareBool(a.Delta, b.Delta),
		strings.Compare(a.Service, b.Service),
		cmp.Compare(a.Clusters, b.Clusters),
		cmp.Compare(a.Classes, b.Classes),
		cmp.Compare(a.StreamsPerConn, b.StreamsPerConn),
		cmp.Compare(a.Unique, b.Unique),
		cmp.Compare(a.Pace, b.Pace),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// compareRuns is a total order on what a run measured, so that the report
// does not depend on the order of the input files.
func compareRuns(a, b Run) int {
	return cmp.Or(
		compareKeys(keyOf(a), keyOf(b)),
		cmp.Compare(a.Clients, b.Clients),
		cmp.Compare(a.Last, b.Last),
		cmp.Compare(a.P50, b.P50),
		cmp.Compare(a.First, b.First),
		cmp.Compare(a.P99, b.P99),
		cmp.Compare(a.ServerCPU, b.ServerCPU),
		cmp.Compare(a.ServerRSSIdle, b.ServerRSSIdle),
		cmp.Compare(a.ServerRSSAfter, b.ServerRSSAfter),
	)
}

// dataset is the sorted runs with what the figures and tables share: one
// colour index per series, one dash index per N, and labels that name only
// what varies.
type dataset struct {
	runs   []Run
	series []seriesKey       // sorted; a series' index picks its colour and glyph
	index  map[seriesKey]int // series → index in series
	ns     []int             // every N, sorted; an N's index picks its dash
	// Which dimensions vary across the runs and so appear in labels.
	cacheVaries                                         map[string]bool // per target
	serviceVaries, clustersVary, classesVary, spcVaries bool
	overlapVaries, paceVaries, upstreamVaries           bool
}

func newDataset(runs []Run) *dataset {
	d := &dataset{runs: slices.Clone(runs), index: map[seriesKey]int{}, cacheVaries: map[string]bool{}}
	slices.SortStableFunc(d.runs, compareRuns)
	caches := map[string]map[string]bool{}
	services, clusters, classes, spcs := map[string]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}
	uniques, paces, upstreams := map[float64]bool{}, map[time.Duration]bool{}, map[bool]bool{}
	for _, r := range d.runs {
		k := keyOf(r)
		if _, ok := d.index[k]; !ok {
			d.index[k] = len(d.series)
			d.series = append(d.series, k)
		}
		if !slices.Contains(d.ns, r.Clients) {
			d.ns = append(d.ns, r.Clients)
		}
		if caches[r.Target] == nil {
			caches[r.Target] = map[string]bool{}
		}
		caches[r.Target][r.Cache] = true
		services[r.Service], clusters[r.Clusters], classes[r.Classes], spcs[r.StreamsPerConn] = true, true, true, true
		uniques[r.Unique], paces[r.Pace] = true, true
		if r.Target == "relay" {
			upstreams[r.UpstreamDelta] = true
		}
	}
	slices.Sort(d.ns)
	for t, cs := range caches {
		d.cacheVaries[t] = len(cs) > 1
	}
	d.serviceVaries, d.clustersVary, d.classesVary, d.spcVaries = len(services) > 1, len(clusters) > 1, len(classes) > 1, len(spcs) > 1
	d.overlapVaries, d.paceVaries, d.upstreamVaries = len(uniques) > 1, len(paces) > 1, len(upstreams) > 1
	return d
}

// protocol is "sotw" or "delta", with the service when the run names it.
func protocol(delta bool, service string) string {
	p := "sotw"
	if delta {
		p = "delta"
	}
	if service != "" {
		p += " " + service
	}
	return p
}

// label names a series: target[/cache] protocol, then whatever else varies
// across the data set. The cache is shown for direct (the cache serves the
// clients) and for any target run over more than one cache.
func (d *dataset) label(k seriesKey) string {
	var b strings.Builder
	b.WriteString(k.Target)
	if k.Cache != "" && (k.Target == "direct" || d.cacheVaries[k.Target]) {
		b.WriteString("/" + k.Cache)
	}
	b.WriteString(" " + d.scenarioLabel(k.scenario(0)))
	return b.String()
}

// scenarioLabel names a scenario's protocol and whatever else varies, without
// N.
func (d *dataset) scenarioLabel(s scenario) string {
	parts := []string{protocol(s.Delta, s.Service)}
	if d.serviceVaries && s.Service == "" {
		parts[0] += " (service unknown)"
	}
	if d.upstreamVaries && s.UpstreamDelta {
		parts[0] += " (delta upstream)"
	}
	if d.clustersVary {
		parts = append(parts, fmt.Sprintf("%d clusters", s.Clusters))
	}
	if d.classesVary {
		parts = append(parts, fmt.Sprintf("%d classes", s.Classes))
	}
	if d.spcVaries {
		parts = append(parts, fmt.Sprintf("%d streams/conn", s.StreamsPerConn))
	}
	if d.overlapVaries {
		parts = append(parts, fmt.Sprintf("overlap %g", 1-s.Unique))
	}
	if d.paceVaries {
		if s.Pace > 0 {
			parts = append(parts, "classes "+s.Pace.String()+" apart")
		} else {
			parts = append(parts, "unpaced")
		}
	}
	return strings.Join(parts, ", ")
}

// runLabel names one run: its series and N.
func (d *dataset) runLabel(r Run) string {
	return fmt.Sprintf("%s N=%d", d.label(keyOf(r)), r.Clients)
}

// point is a series' value at one N: the median over that N's runs.
type point struct {
	N     int
	Value float64
}

// line is one series' points, sorted by N, for one metric.
type line struct {
	Key    seriesKey
	Index  int
	Points []point
}

// lines evaluates metric on every run (ok false: the run did not measure
// it) and returns, per series with at least one value, the median at each N.
// Series without a value are left out.
func (d *dataset) lines(metric func(Run) (float64, bool)) []line {
	var out []line
	for i, k := range d.series {
		byN := map[int][]float64{}
		for _, r := range d.runs {
			if keyOf(r) != k {
				continue
			}
			if v, ok := metric(r); ok {
				byN[r.Clients] = append(byN[r.Clients], v)
			}
		}
		if len(byN) == 0 {
			continue
		}
		l := line{Key: k, Index: i}
		for _, n := range d.ns {
			if vs, ok := byN[n]; ok {
				l.Points = append(l.Points, point{N: n, Value: median(vs)})
			}
		}
		out = append(out, l)
	}
	return out
}

// median of a non-empty set; the mean of the middle two for an even count.
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// medianRuns returns, per series and N, the run with the median time to
// last client (the lower median of an even count), in order.
func (d *dataset) medianRuns() []Run {
	var out []Run
	for start := 0; start < len(d.runs); {
		end := start + 1
		for end < len(d.runs) && keyOf(d.runs[end]) == keyOf(d.runs[start]) && d.runs[end].Clients == d.runs[start].Clients {
			end++
		}
		// d.runs is sorted by series, N, then time to last.
		out = append(out, d.runs[start+(end-start-1)/2])
		start = end
	}
	return out
}
