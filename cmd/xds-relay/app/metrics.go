package app

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/relay/overload"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/xdstype"
	"github.com/xds-relay/xds-relay/upstream"
)

// telemetry records the relay's metrics with OpenTelemetry and exposes them
// in the Prometheus text format on the admin port (/metrics). Names and
// labels are listed in docs/operations.md; every label value is bounded.
type telemetry struct {
	// Read-only after creation (the instruments are safe for concurrent
	// use; classes locks for itself).
	provider *sdkmetric.MeterProvider
	handler  http.Handler
	tracer   trace.Tracer

	streams       metric.Int64UpDownCounter
	subscriptions metric.Int64UpDownCounter
	disconnects   metric.Int64Counter
	pushes        metric.Int64Counter
	pushBytes     metric.Int64Counter
	collapses     metric.Int64Counter
	fanout        metric.Float64Histogram

	// By class: their series go with the class's label (metrics_classes.go).
	clientACKs    *classCounter
	clientNACKs   *classCounter
	reconnects    *classCounter
	upstreamResps *classCounter
	restarts      *classCounter
	repeats       *classCounter
	namesIgnored  *classCounter
	streamWaits   *classCounter
	loadReceived  *classCounter
	loadForwarded *classCounter
	connFailures  *classCounter
	moves         *classCounter

	attrsMu sync.RWMutex
	attrs   map[[6]string]*labels // label tuple -> its options, built once; guarded by attrsMu

	classes classLabels     // bounds the class label
	byClass []*classCounter // the counters above with a class label
}

var (
	_ relay.Metrics    = (*telemetry)(nil)
	_ upstream.Metrics = (*telemetry)(nil)
)

// gauges are read when /metrics is scraped.
type gauges struct {
	classesAndShards func() (classes, shards int)
	upstreamUp       func() map[string]bool          // class -> connected (nil in file mode)
	drops            func() []drop.Count             // drops by reason (nil: none counted)
	storeCounts      func() (resources, bytes int64) // the resource store (nil: none)
	lingers          func() shard.LingerStats        // nil: none counted
	overload         func() (overload.Status, bool)  // nil or false: no memory ceiling
	peers            func() relay.PeerStats          // connections and per-peer refusals (nil: none)
	members          func() []upstream.MemberStatus  // an affinity tier's members (nil or empty: none)
}

func newTelemetry(g gauges, tracer trace.Tracer) (*telemetry, error) {
	reg := promclient.NewRegistry()
	// The Go runtime's and the process's own series (go_*, process_*), as
	// every Prometheus-instrumented server has them.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Name: "xds_relay_fanout_duration"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
			Boundaries: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}},
	)))
	m := provider.Meter("github.com/xds-relay/xds-relay")
	t := &telemetry{provider: provider, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), tracer: tracer,
		attrs: map[[6]string]*labels{}}
	var errs []error
	keep := func(err error) { errs = append(errs, err) }
	var e error
	t.streams, e = m.Int64UpDownCounter("xds_relay_downstream_streams", metric.WithDescription("Open downstream streams, by variant."))
	keep(e)
	t.subscriptions, e = m.Int64UpDownCounter("xds_relay_downstream_subscriptions", metric.WithDescription("Downstream streams subscribed to a type, by variant and type."))
	keep(e)
	for _, c := range []struct {
		c                *metric.Int64Counter
		name, unit, desc string
	}{
		{&t.disconnects, "xds_relay_downstream_disconnects", "", "Downstream streams ended, by variant and reason."},
		{&t.pushes, "xds_relay_pushes", "", "Responses written to clients, by variant and type."},
		{&t.pushBytes, "xds_relay_push_bytes", "By", "Bytes of responses written to clients, by variant and type."},
		{&t.collapses, "xds_relay_queue_collapses", "", "Slow clients' queues collapsed to the latest state (responses dropped), by variant."},
	} {
		*c.c, e = m.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit(c.unit))
		keep(e)
	}
	for _, c := range []struct {
		c          **classCounter
		name, desc string
	}{
		{&t.clientACKs, "xds_relay_client_acks", "ACKs from clients, by class and type."},
		{&t.clientNACKs, "xds_relay_client_nacks", "NACKs from clients, by class and type."},
		{&t.reconnects, "xds_relay_upstream_reconnects", "Upstream stream failures followed by a retry, by class."},
		{&t.connFailures, "xds_relay_upstream_connection_failures", "Upstream class streams that could not be opened because no upstream connection could be made or was ready (also in xds_relay_upstream_reconnects), by class."},
		{&t.upstreamResps, "xds_relay_upstream_responses", "Upstream responses ACKed or NACKed by the relay, by class, type and result."},
		{&t.restarts, "xds_relay_upstream_restarts", "Upstream streams the relay restarted itself (not failures), by class and reason: wildcard, claim, names_ignored, resubscribe, resync, move."},
		{&t.repeats, "xds_relay_upstream_repeated_responses", "Upstream responses repeating the previous one in answer to an ACK (a storm: their ACKs are deferred), by class and type."},
		{&t.streamWaits, "xds_relay_upstream_stream_waits", "Upstream class streams that found every upstream connection carrying the streams its peer allows, with upstream.max_connections open, and waited, by class."},
		{&t.loadReceived, "xds_relay_load_reports_received", "Load reports from clients (LoadReportingService) merged into their class's window, by class."},
		{&t.loadForwarded, "xds_relay_load_reports_forwarded", "Load reports sent to the control plane (one stream per class, each report the sum of the class's clients'), by class."},
		{&t.moves, "xds_relay_upstream_moves", "Upstream class streams opened on another member of the affinity tier than the class's last (upstream.affinity: class): a move to the member the class now goes to, or away from one that failed, by class."},
		{&t.namesIgnored, "xds_relay_upstream_names_ignored", "Upstream types asked for as the wildcard because a request naming resources went unanswered (SotW; the class then holds every resource of the type), by class and type."},
	} {
		*c.c, e = newClassCounter(m, c.name, c.desc)
		keep(e)
		t.byClass = append(t.byClass, *c.c)
	}
	t.fanout, e = m.Float64Histogram("xds_relay_fanout_duration", metric.WithDescription("Time from an upstream update to the last stream of a shard written, by type."), metric.WithUnit("s"))
	keep(e)

	classes, e := m.Int64ObservableGauge("xds_relay_node_classes", metric.WithDescription("Node classes."))
	keep(e)
	shards, e := m.Int64ObservableGauge("xds_relay_shards", metric.WithDescription("Shards (class, type, name set)."))
	keep(e)
	// Both from one count per scrape.
	_, e = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c, s := g.classesAndShards()
		o.ObserveInt64(classes, int64(c))
		o.ObserveInt64(shards, int64(s))
		return nil
	}, classes, shards)
	keep(e)
	storeResources, e := m.Int64ObservableGauge("xds_relay_store_resources", metric.WithDescription("Distinct resources held for all classes (one per content)."))
	keep(e)
	storeBytes, e := m.Int64ObservableGauge("xds_relay_store_bytes", metric.WithDescription("Encoded bytes (Any and TTL) of the distinct resources held."), metric.WithUnit("By"))
	keep(e)
	_, e = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if g.storeCounts == nil {
			return nil
		}
		n, b := g.storeCounts()
		o.ObserveInt64(storeResources, n)
		o.ObserveInt64(storeBytes, b)
		return nil
	}, storeResources, storeBytes)
	lingering, e := m.Int64ObservableGauge("xds_relay_lingering_shards", metric.WithDescription("Shards left by their last stream's end or REST poll, kept for node_classes.linger (included in xds_relay_shards)."))
	keep(e)
	lingers, e := m.Int64ObservableCounter("xds_relay_shard_lingers", metric.WithDescription("Shard lingers that ended, by outcome: reused, expired, evicted, dropped."))
	keep(e)
	// Both from one count per scrape.
	_, e = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if g.lingers == nil {
			return nil
		}
		st := g.lingers()
		o.ObserveInt64(lingering, int64(st.Lingering))
		for _, oc := range shard.LingerOutcomes {
			o.ObserveInt64(lingers, st.Ended[oc], t.opt("outcome", oc.String()).obs...)
		}
		return nil
	}, lingering, lingers)
	keep(e)
	_, e = m.Int64ObservableGauge("xds_relay_upstream_connected", metric.WithDescription("1 when the class's upstream stream is connected, else 0, by class."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if g.upstreamUp == nil {
				return nil
			}
			// Classes folded into one label are up only if all of them are.
			byLabel := map[string]bool{}
			for class, up := range g.upstreamUp() {
				l := t.classes.label(class)
				if prev, ok := byLabel[l]; ok {
					up = up && prev
				}
				byLabel[l] = up
			}
			for l, up := range byLabel {
				v := int64(0)
				if up {
					v = 1
				}
				o.Observe(v, metric.WithAttributes(attribute.String("class", l)))
			}
			return nil
		}))
	keep(e)
	_, e = m.Int64ObservableCounter("xds_relay_drops", metric.WithDescription("What the relay decided not to send or answer at once, by reason (see docs/operations.md)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			if g.drops == nil {
				return nil
			}
			for _, c := range g.drops() {
				o.Observe(int64(c.N), t.opt("reason", c.Reason.String()).obs...)
			}
			return nil
		}))
	keep(e)
	if g.overload != nil {
		keep(registerOverloadMetrics(m, g.overload))
	}
	keep(t.registerPeerMetrics(m, g.peers))
	keep(registerMemberMetrics(m, g.members))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return t, nil
}

// labels are a label tuple's options, as the slices the instruments take:
// spreading a prebuilt slice into a variadic call allocates nothing.
type labels struct {
	add []metric.AddOption
	rec []metric.RecordOption
	obs []metric.ObserveOption
}

// opt returns the options of a label tuple (at most three pairs), built
// once. Keyed by a fixed array: nothing allocates per measurement on the
// push path (see TestPushMetricDoesNotAllocate).
func (t *telemetry) opt(kv ...string) *labels {
	var key [6]string
	copy(key[:], kv)
	t.attrsMu.RLock()
	l, ok := t.attrs[key]
	t.attrsMu.RUnlock()
	if ok {
		return l
	}
	attrs := make([]attribute.KeyValue, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String(kv[i], kv[i+1]))
	}
	o := metric.WithAttributeSet(attribute.NewSet(attrs...))
	l = &labels{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}, obs: []metric.ObserveOption{o}}
	t.attrsMu.Lock()
	t.attrs[key] = l
	t.attrsMu.Unlock()
	return l
}

// typeLabel bounds the type label: the registered types by their Label,
// anything else a client may invent on ADS as "other".
func typeLabel(typeURL string) string {
	if t := xdstype.Lookup(typeURL); t != nil {
		return t.Label
	}
	return "other"
}

var bg = context.Background()

func (t *telemetry) StreamOpened(variant string) {
	t.streams.Add(bg, 1, t.opt("variant", variant).add...)
}
func (t *telemetry) StreamClosed(variant, reason string) {
	t.streams.Add(bg, -1, t.opt("variant", variant).add...)
	t.disconnects.Add(bg, 1, t.opt("variant", variant, "reason", reason).add...)
}
func (t *telemetry) TypeSubscribed(variant, typeURL string) {
	t.subscriptions.Add(bg, 1, t.opt("variant", variant, "type", typeLabel(typeURL)).add...)
}
func (t *telemetry) TypeUnsubscribed(variant, typeURL string) {
	t.subscriptions.Add(bg, -1, t.opt("variant", variant, "type", typeLabel(typeURL)).add...)
}
func (t *telemetry) Pushed(variant, typeURL string, bytes int) {
	o := t.opt("variant", variant, "type", typeLabel(typeURL))
	t.pushes.Add(bg, 1, o.add...)
	t.pushBytes.Add(bg, int64(bytes), o.add...)
}
func (t *telemetry) ClientACK(class, typeURL string) {
	t.clientACKs.add("class", t.classes.label(class), "type", typeLabel(typeURL))
}
func (t *telemetry) ClientNACK(class, typeURL string) {
	t.clientNACKs.add("class", t.classes.label(class), "type", typeLabel(typeURL))
}
func (t *telemetry) QueueCollapsed(variant string) {
	t.collapses.Add(bg, 1, t.opt("variant", variant).add...)
}
func (t *telemetry) Reconnecting(class string) {
	t.reconnects.add("class", t.classes.label(class))
}
func (t *telemetry) Response(class, typeURL string, accepted bool) {
	result := "nack"
	if accepted {
		result = "ack"
	}
	t.upstreamResps.add("class", t.classes.label(class), "type", typeLabel(typeURL), "result", result)
}
func (t *telemetry) Restarted(class string, reason upstream.RestartReason) {
	t.restarts.add("class", t.classes.label(class), "reason", reason.String())
}
func (t *telemetry) RepeatedResponse(class, typeURL string) {
	t.repeats.add("class", t.classes.label(class), "type", typeLabel(typeURL))
}
func (t *telemetry) WaitingForStream(class string) {
	t.streamWaits.add("class", t.classes.label(class))
}
func (t *telemetry) LoadReportReceived(class string) {
	t.loadReceived.add("class", t.classes.label(class))
}
func (t *telemetry) LoadReportSent(class string) {
	t.loadForwarded.add("class", t.classes.label(class))
}
func (t *telemetry) ConnectionFailed(class string) {
	t.connFailures.add("class", t.classes.label(class))
}
func (t *telemetry) Moved(class string) {
	t.moves.add("class", t.classes.label(class))
}
func (t *telemetry) NamesIgnored(class, typeURL string) {
	t.namesIgnored.add("class", t.classes.label(class), "type", typeLabel(typeURL))
}

// Fanout records one shard's fan-out of an update: in the histogram, and as
// a span under the upstream response's span (when that one is traced).
func (t *telemetry) Fanout(ctx context.Context, typeURL string, start time.Time, d time.Duration) {
	t.fanout.Record(bg, d.Seconds(), t.opt("type", typeLabel(typeURL)).rec...)
	if trace.SpanContextFromContext(ctx).IsSampled() {
		_, span := t.tracer.Start(ctx, "xds-relay.fanout", trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("xds.type_url", typeURL)))
		span.End(trace.WithTimestamp(start.Add(d)))
	}
}

func (t *telemetry) shutdown() { _ = t.provider.Shutdown(context.Background()) }
