package app

import (
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
	"github.com/xds-relay/xds-relay/upstream"
)

// Bounds on the work and the size of the status page. The page says when a
// bound cut something off; the JSON under /debug/ has everything.
const (
	statusMaxStreams = 10000 // downstream streams inspected
	statusMaxClasses = 500   // rows of the classes and upstream tables
	statusMaxShards  = 1000  // rows of the shards table
	statusMaxNACKs   = 50    // rows of the client NACK table
	statusMaxNames   = 4     // resource names shown per subscription
	statusMaxText    = 300   // characters shown of an error or NACK message
)

// processStart is when the process started, for the uptime shown.
var processStart = time.Now()

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"bytes": humanBytes,
}).Parse(statusHTML))

// statusPage serves GET / on the admin port: an HTML page for operators
// (upstream state, node classes, shards, client NACKs and errors). Scripts
// use the JSON under /debug/.
func (r *Relay) statusPage() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/" {
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var buf bytes.Buffer
		if err := statusTemplate.Execute(&buf, r.statusView(time.Now())); err != nil {
			r.log.Error("status page", zap.Error(err))
			http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		if req.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(escapeText(buf.Bytes()))
	})
}

// statusView is everything the status page shows.
type statusView struct {
	Generated string
	RelayID   string
	Listen    string
	Admin     string
	Mode      string // "ADS (SotW)", "ADS (delta)" or "files"
	Upstream  string // the upstream address, or the source directory
	Uptime    string

	// Health is the summary badge: "ok", "warn" or "bad", with its text.
	Health     string
	HealthText string

	Streams          int  // open downstream streams
	StreamsScanned   int  // streams inspected for the tables
	StreamsTruncated bool // StreamsScanned < Streams
	ClientNACKs      int  // NACKs from the inspected streams
	Collapses        int  // queue collapses of the inspected streams
	UpstreamUp       int  // upstream streams connected
	UpstreamTotal    int
	UpstreamBadge    string

	Upstreams         []upstreamRow
	UpstreamTruncated int // rows left off
	// Affinity: upstream.affinity is class; Members is the tier's member
	// set, each with its classes.
	Affinity bool
	Members  []memberRow
	Files    *filesRow

	Classes          []classRow
	ClassesTruncated int
	Shards           []shardRow
	ShardsTruncated  int
	Lingers          []lingerCount // how shard lingers ended, by outcome
	Lingering        int           // shards lingering now

	NACKs          []nackRow
	NACKsTruncated int // rows left off
	Errors         []errorRow

	Drops      []dropCount // every reason, zeros included
	DropsTotal uint64

	// The memory ceiling's state (empty: none), badge, budget and heap.
	Memory, MemoryBadge, MemoryBudget, MemoryHeap string
}

// memberRow is one member of an affinity tier.
type memberRow struct {
	upstream.MemberStatus
	Badge, State string // "ok" and "live", or "bad" and "down"
}

type upstreamRow struct {
	Class      string
	Member     string // upstream.affinity: class: the member the stream is on
	Moves      int
	State      string
	Badge      string // "ok", "warn", "bad"
	Reconnects int
	// ConnectionFailures: reconnects that could not connect (issue 27).
	ConnectionFailures int
	// UnavailableSince: the upstream is unreachable past
	// upstream.unavailable_after since then (empty: it is not).
	UnavailableSince string
	Restarts         upstream.RestartCounts
	Responses        int
	ACKs             int
	NACKs            int
	LastError        string
	LastNACK         string
	Versions         []typeVersion
}

type typeVersion struct {
	Type    string // short name
	TypeURL string
	Version string
}

type filesRow struct {
	Dir       string
	Watching  bool
	Badge     string
	State     string
	Files     int
	Loads     uint64
	Failures  uint64
	LoadedAt  string
	LastError string
	Resources []typeCount
}

type typeCount struct {
	Type    string
	TypeURL string
	Count   int
}

type classRow struct {
	Name          string
	FirstNode     string
	Streams       int // downstream streams of the class (inspected ones)
	Subscriptions int // shard watchers, summed over types and shards
	Types         []typeName
	NACKs         int
	State         string // upstream stream state ("" in file mode)
	Badge         string
}

type typeName struct {
	Short string
	URL   string
}

type shardRow struct {
	Class        string
	Type         string
	TypeURL      string
	Wildcard     bool
	Subscription string // names, truncated; empty for wildcard
	NamesTitle   string // every name shown, for the tooltip (truncated)
	Version      string
	Received     bool
	Resources    int
	Bytes        int
	Streams      int
	Lingering    bool // kept for node_classes.linger after its last stream or poll ended
}

// lingerCount is how many shard lingers ended one way.
type lingerCount struct {
	Outcome string
	Count   int64
}

type nackRow struct {
	Stream   uint64
	Node     string
	Class    string
	Type     string
	TypeURL  string
	Count    int
	LastNACK string
}

type errorRow struct {
	Source  string // "upstream class-a", "file source"
	Kind    string // "error", "NACK sent upstream"
	Message string
}

// statusView collects the page's data; bounded by the statusMax constants.
func (r *Relay) statusView(now time.Time) statusView {
	v := statusView{
		Generated: now.UTC().Format("2006-01-02 15:04:05 MST"),
		RelayID:   r.cfg.Upstream.RelayID,
		Listen:    r.Addr(),
		Admin:     r.AdminAddr(),
		Uptime:    humanDuration(now.Sub(processStart)),
	}

	// Downstream streams: bounded.
	v.Streams = r.server.StreamCount()
	streams := r.server.Streams(statusMaxStreams)
	v.StreamsScanned = len(streams)
	v.StreamsTruncated = v.Streams > len(streams)
	classStreams := map[string]int{}
	classNACKs := map[string]int{}
	var nacks []nackRow
	for _, s := range streams {
		classStreams[s.Class]++
		v.Collapses += s.Collapses
		for _, ts := range s.Types {
			if ts.NACKs == 0 {
				continue
			}
			v.ClientNACKs += ts.NACKs
			classNACKs[s.Class] += ts.NACKs
			nacks = append(nacks, nackRow{
				Stream: s.ID, Node: s.Node, Class: s.Class,
				Type: shortType(ts.TypeURL), TypeURL: ts.TypeURL,
				Count: ts.NACKs, LastNACK: truncate(ts.LastNACK, statusMaxText),
			})
		}
	}
	// The most NACKing first; ties by stream id.
	slices.SortStableFunc(nacks, func(a, b nackRow) int { return cmp.Compare(b.Count, a.Count) })
	if len(nacks) > statusMaxNACKs {
		v.NACKsTruncated = len(nacks) - statusMaxNACKs
		nacks = nacks[:statusMaxNACKs]
	}
	v.NACKs = nacks

	// Upstream.
	upstreamState := map[string]string{}
	switch {
	case r.upstream != nil:
		v.Mode = "ADS (SotW)"
		if r.cfg.Upstream.Protocol == "delta" {
			v.Mode = "ADS (delta)"
		}
		v.Upstream = r.cfg.Upstream.Address
		v.Affinity = r.cfg.Upstream.Affinity == "class"
		for _, m := range r.upstream.Members() {
			row := memberRow{MemberStatus: m, Badge: "ok", State: "live"}
			if !m.Live {
				row.Badge, row.State = "bad", "down"
			}
			v.Members = append(v.Members, row)
		}
		for _, s := range r.upstream.Status() {
			upstreamState[s.Class] = s.State
			v.UpstreamTotal++
			if s.State == upstream.StateConnected {
				v.UpstreamUp++
			}
			if s.LastError != "" {
				v.Errors = append(v.Errors, errorRow{Source: "upstream " + s.Class, Kind: "stream error", Message: truncate(s.LastError, statusMaxText)})
			}
			if s.LastNACK != "" {
				v.Errors = append(v.Errors, errorRow{Source: "upstream " + s.Class, Kind: "NACK sent upstream", Message: truncate(s.LastNACK, statusMaxText)})
			}
			if len(v.Upstreams) >= statusMaxClasses {
				v.UpstreamTruncated++
				continue
			}
			row := upstreamRow{
				Class: s.Class, Member: s.Member, Moves: s.Moves, State: s.State, Badge: stateBadge(s.State),
				Reconnects: s.Reconnects, Restarts: s.Restarts, Responses: s.Responses, ACKs: s.ACKs, NACKs: s.NACKs,
				LastError: truncate(s.LastError, statusMaxText), LastNACK: truncate(s.LastNACK, statusMaxText),
				ConnectionFailures: s.ConnectionFailures,
			}
			if s.UnavailableSince != nil {
				row.UnavailableSince = s.UnavailableSince.UTC().Format("15:04:05 MST")
			}
			for _, typeURL := range sortedKeys(s.Versions) {
				row.Versions = append(row.Versions, typeVersion{Type: shortType(typeURL), TypeURL: typeURL, Version: s.Versions[typeURL]})
			}
			v.Upstreams = append(v.Upstreams, row)
		}
	case r.files != nil:
		v.Mode = "files"
		st := r.files.Status()
		v.Upstream = st.Dir
		f := &filesRow{
			Dir: st.Dir, Watching: st.Watching, Files: len(st.Files), Loads: st.Loads, Failures: st.Failures,
			LastError: truncate(st.LastError, statusMaxText),
		}
		if !st.LoadedAt.IsZero() {
			f.LoadedAt = st.LoadedAt.UTC().Format("2006-01-02 15:04:05 MST")
		}
		switch {
		case st.LastError != "":
			f.State, f.Badge = "stale: last load failed", "bad"
		case st.Watching:
			f.State, f.Badge = "watching", "ok"
		default:
			f.State, f.Badge = "not watching", "warn"
		}
		for _, typeURL := range sortedKeys(st.Resources) {
			f.Resources = append(f.Resources, typeCount{Type: shortType(typeURL), TypeURL: typeURL, Count: st.Resources[typeURL]})
		}
		if st.LastError != "" {
			v.Errors = append(v.Errors, errorRow{Source: "file source " + st.Dir, Kind: "load error", Message: f.LastError})
		}
		v.Files = f
	}

	// Classes and their shards.
	for _, c := range r.registry.Classes() {
		if len(v.Classes) >= statusMaxClasses {
			v.ClassesTruncated++
			continue
		}
		row := classRow{
			Name: c.Name, FirstNode: c.Node.GetId(), Streams: classStreams[c.Name], NACKs: classNACKs[c.Name],
			State: upstreamState[c.Name], Badge: stateBadge(upstreamState[c.Name]),
		}
		for _, ts := range c.Status() {
			row.Types = append(row.Types, typeName{Short: shortType(ts.TypeURL), URL: ts.TypeURL})
			for _, s := range ts.Shards {
				row.Subscriptions += s.Streams
				if len(v.Shards) >= statusMaxShards {
					v.ShardsTruncated++
					continue
				}
				sr := shardRow{
					Class: c.Name, Type: shortType(ts.TypeURL), TypeURL: ts.TypeURL, Wildcard: s.Wildcard,
					Version: s.Version, Received: ts.Received, Resources: s.Resources, Bytes: s.Bytes, Streams: s.Streams,
					Lingering: s.Lingering,
				}
				if !s.Wildcard || len(s.Names) > 0 {
					sr.Subscription, sr.NamesTitle = namesSummary(s.Names)
				}
				v.Shards = append(v.Shards, sr)
			}
		}
		v.Classes = append(v.Classes, row)
	}

	lingers := r.registry.Lingers()
	v.Lingering = lingers.Lingering
	for _, o := range shard.LingerOutcomes {
		v.Lingers = append(v.Lingers, lingerCount{Outcome: o.String(), Count: lingers.Ended[o]})
	}

	v.Drops = r.dropCounts()
	for _, d := range v.Drops {
		v.DropsTotal += d.Count
	}

	switch {
	case v.UpstreamTotal == 0:
	case v.UpstreamUp == v.UpstreamTotal:
		v.UpstreamBadge = "ok"
	case v.UpstreamUp == 0:
		v.UpstreamBadge = "bad"
	default:
		v.UpstreamBadge = "warn"
	}

	// The summary badge.
	switch {
	case r.upstream != nil && v.UpstreamTotal > 0 && v.UpstreamUp == 0:
		v.Health, v.HealthText = "bad", "upstream down"
	case r.upstream != nil && v.UpstreamUp < v.UpstreamTotal:
		v.Health, v.HealthText = "warn", "upstream degraded"
	case v.Files != nil && v.Files.Badge != "ok":
		v.Health, v.HealthText = v.Files.Badge, "file source "+v.Files.State
	case v.ClientNACKs > 0:
		v.Health, v.HealthText = "warn", "clients NACKing"
	default:
		v.Health, v.HealthText = "ok", "healthy"
	}
	r.memoryCard(&v)
	return v
}

// stateBadge colours an upstream stream state.
func stateBadge(state string) string {
	switch state {
	case upstream.StateConnected:
		return "ok"
	case upstream.StateConnecting, upstream.StateBackoff:
		return "warn"
	case upstream.StateStopped, upstream.StateWaiting:
		return "bad"
	default:
		return "none"
	}
}

// shortType names a type URL briefly: a registered type by its usual name
// (CDS, EDS, …), another by its message name.
func shortType(typeURL string) string {
	if t := xdstype.Lookup(typeURL); t != nil {
		return t.Short
	}
	if i := strings.LastIndexAny(typeURL, "./"); i >= 0 && i+1 < len(typeURL) {
		return typeURL[i+1:]
	}
	return typeURL
}

// namesSummary shows the first few names and how many more; title lists
// more of them for the tooltip.
func namesSummary(names []string) (shown, title string) {
	if len(names) == 0 {
		return "(none)", ""
	}
	n := min(len(names), statusMaxNames)
	shown = strings.Join(names[:n], ", ")
	if len(names) > n {
		shown += fmt.Sprintf(" … (+%d more)", len(names)-n)
	}
	return truncate(shown, statusMaxText), truncate(strings.Join(names, "\n"), 4*statusMaxText)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func humanBytes(n int) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	case n < 1024*1024*1024:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
	default:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1024*1024*1024))
	}
}

func humanDuration(d time.Duration) string {
	d = d.Round(time.Second)
	days := d / (24 * time.Hour)
	d -= days * 24 * time.Hour
	h := d / time.Hour
	d -= h * time.Hour
	m := d / time.Minute
	s := (d - m*time.Minute) / time.Second
	switch {
	case days > 0:
		return fmt.Sprintf("%dd %dh %dm", days, h, m)
	case h > 0:
		return fmt.Sprintf("%dh %dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm %ds", m, s)
	default:
		return fmt.Sprintf("%ds", s)
	}
}
