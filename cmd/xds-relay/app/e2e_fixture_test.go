package app_test

// The set-up of the end-to-end tests: a go-control-plane management server
// (xdstest.ControlPlane, snapshots keyed by node.cluster), relays started
// with the e2e defaults plus what a test states, and raw xDS clients
// (xdstest.Client) whose methods fail the test.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// relayID is the node id the relay under test presents upstream.
const relayID = "xds-relay-e2e"

// testTimeout bounds every test.
const testTimeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// controlPlane is go-control-plane serving SotW and delta ADS from a
// snapshot cache keyed by node.cluster: the relay copies the class's
// cluster into the node it presents upstream.
type controlPlane struct {
	*xdstest.ControlPlane
}

// startMgmt starts a control plane on addr ("127.0.0.1:0" for any port, or
// a previous control plane's address to take its place); edit, if given,
// changes its options. It is stopped when the test ends.
func startMgmt(t *testing.T, addr string, edit ...func(*xdstest.CPOptions)) *controlPlane {
	t.Helper()
	opts := xdstest.CPOptions{Cache: xdstest.Snapshot, Addr: addr, NodeKey: (*corev3.Node).GetCluster}
	for _, e := range edit {
		e(&opts)
	}
	cp, err := xdstest.StartControlPlane(opts)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	t.Cleanup(cp.Stop)
	return &controlPlane{cp}
}

// Set installs res as version for a node class.
func (m *controlPlane) Set(t *testing.T, class, version string, res map[resource.Type][]types.Resource) {
	t.Helper()
	if err := m.SetResources(class, version, res); err != nil {
		t.Fatalf("set snapshot: %v", err)
	}
}

// Streams returns how many SotW streams were opened and the node of each
// stream's first request.
func (m *controlPlane) Streams() (int, []*corev3.Node) { return m.Stats().Streams, m.Nodes() }

// Sent returns the delta responses sent, as "type: [names] -[removed]".
func (m *controlPlane) Sent() []string {
	var out []string
	for _, r := range m.DeltaSent() {
		removed := slices.Sorted(slices.Values(r.GetRemovedResources()))
		out = append(out, fmt.Sprintf("%s: %v -%v", r.GetTypeUrl(), deltaResNames(r), removed))
	}
	return out
}

// relayStart is what startRelay starts: the e2e defaults, changed by
// relayOptions.
type relayStart struct {
	cfg  app.Config
	opts []app.Option
	logs **observer.ObservedLogs // observeLogs: set to the relay's log, info and above
}

// relayOption states how a test's relay differs from the e2e defaults.
type relayOption func(*relayStart)

// withConfig edits the relay's configuration.
func withConfig(edit func(*app.Config)) relayOption { return func(s *relayStart) { edit(&s.cfg) } }

// relayAs presents id upstream instead of relayID.
func relayAs(id string) relayOption {
	return withConfig(func(c *app.Config) { c.Upstream.RelayID = id })
}

// upstreamProtocol speaks protocol ("sotw" or "delta") to the upstream.
func upstreamProtocol(p string) relayOption {
	return withConfig(func(c *app.Config) { c.Upstream.Protocol = p })
}

// listenAt listens for xDS on addr (a previous relay's address may still be
// in the middle of being released).
func listenAt(addr string) relayOption {
	return withConfig(func(c *app.Config) { c.Listen = addr })
}

// sampleSource serves the sample configuration's files instead of a
// control plane.
func sampleSource() relayOption { return sourceDir(sampleDir) }

// sampleDir is the sample configuration's directory.
const sampleDir = "../../../deploy/sample-config"

// sourceDir serves the files of dir instead of a control plane.
func sourceDir(dir string) relayOption {
	return withConfig(func(c *app.Config) { c.Source.Dir = dir })
}

// observeLogs records the relay's log lines at info and above in *logs
// (the test log still gets warnings and errors).
func observeLogs(logs **observer.ObservedLogs) relayOption {
	return func(s *relayStart) { s.logs = logs }
}

// withApp passes options to app.Start.
func withApp(opts ...app.Option) relayOption {
	return func(s *relayStart) { s.opts = append(s.opts, opts...) }
}

// startRelay starts a relay in front of upstreamAddr ("" with a source) on
// loopback listeners, with a fast backoff, changed by opts. It is closed
// when the test ends.
func startRelay(t *testing.T, upstreamAddr string, opts ...relayOption) *app.Relay {
	t.Helper()
	s := relayStart{cfg: app.DefaultConfig()}
	s.cfg.Listen, s.cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	s.cfg.Upstream.Address = upstreamAddr
	s.cfg.Upstream.RelayID = relayID
	s.cfg.Upstream.Backoff.Initial = 50 * time.Millisecond
	s.cfg.Upstream.Backoff.Max = 500 * time.Millisecond
	for _, o := range opts {
		o(&s)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	if s.logs != nil {
		core, logs := observer.New(zap.InfoLevel)
		log, *s.logs = zap.New(zapcore.NewTee(log.Core(), core)), logs
	}
	log = log.With(zap.String("relay", s.cfg.Upstream.RelayID))
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := app.Start(s.cfg, log, s.opts...)
		if err == nil {
			t.Cleanup(r.Close)
			return r
		}
		if s.cfg.Listen == "127.0.0.1:0" || time.Now().After(deadline) {
			t.Fatalf("app.Start: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // retry pace while the port is released
	}
}

// fixture is the usual set-up: a control plane, and a relay in front of it.
type fixture struct {
	ctx   context.Context
	cp    *controlPlane
	relay *app.Relay
}

// startFixture starts a control plane serving res to class as v1 and a
// relay in front of it, changed by opts.
func startFixture(t *testing.T, class string, res map[resource.Type][]types.Resource, opts ...relayOption) *fixture {
	t.Helper()
	f := &fixture{ctx: testContext(t), cp: startMgmt(t, "127.0.0.1:0")}
	f.cp.Set(t, class, "v1", res)
	f.relay = startRelay(t, f.cp.Addr, opts...)
	return f
}

// sotw dials a SotW ADS client of the relay as node id of class and
// subscribes it to the CDS wildcard.
func (f *fixture) sotw(t *testing.T, id, class string) *adsClient {
	t.Helper()
	c := dialADS(t, f.ctx, f.relay.Addr(), id, class)
	c.Subscribe(resource.ClusterType)
	return c
}

// clusters returns a CDS snapshot of plain EDS clusters with these names.
func clusters(names ...string) map[resource.Type][]types.Resource {
	out := make([]types.Resource, 0, len(names))
	for _, n := range names {
		out = append(out, edsCluster(n))
	}
	return map[resource.Type][]types.Resource{resource.ClusterType: out}
}

func edsCluster(name string) *clusterv3.Cluster {
	c := timedCluster(name, 1)
	c.ConnectTimeout = nil // a plain EDS cluster
	return c
}

// timedCluster is an EDS cluster whose content depends on secs (>= 1):
// change secs to change the cluster.
func timedCluster(name string, secs int) *clusterv3.Cluster {
	return xdstest.Resource(xdstest.ClusterType, name, secs).(*clusterv3.Cluster)
}

// cds lists clusters as resources.
func cds(cs ...*clusterv3.Cluster) []types.Resource {
	out := make([]types.Resource, 0, len(cs))
	for _, c := range cs {
		out = append(out, c)
	}
	return out
}

// loadAssignments are empty load assignments of these clusters.
func loadAssignments(names ...string) []types.Resource {
	out := make([]types.Resource, 0, len(names))
	for _, n := range names {
		out = append(out, &endpointv3.ClusterLoadAssignment{ClusterName: n})
	}
	return out
}

// clientBase is an xdstest.Client of a relay whose methods fail the test.
type clientBase struct {
	*xdstest.Client
	t    *testing.T
	ctx  context.Context
	node *corev3.Node // sent on the first request; may be changed before it
}

func dialClient(t *testing.T, ctx context.Context, addr string, opts xdstest.Options) clientBase {
	t.Helper()
	c, err := xdstest.Dial(addr, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return clientBase{Client: c, t: t, ctx: ctx, node: opts.Node}
}

// event returns the next response within timeout, or the error that ended
// the stream or the wait.
func (c clientBase) event(timeout time.Duration) (xdstest.Event, error) {
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	e, err := c.Client.Next(ctx)
	if err != nil && ctx.Err() != nil && c.Err() == nil {
		return e, fmt.Errorf("no response within %v", timeout)
	}
	if err != nil {
		return e, fmt.Errorf("stream ended: %w", err)
	}
	return e, nil
}

// first subscribes to names of typeURL and returns the first response, or
// the status that ended the stream (or the end of the wait).
func (c clientBase) first(typeURL string, names []string, timeout time.Duration) (proto.Message, error) {
	var err error
	if c.Options().Delta {
		err = c.SendDelta(typeURL, names, nil)
	} else {
		err = c.SendSotW(typeURL, names)
	}
	if err != nil && !errors.Is(err, io.EOF) { // EOF: the stream ended, Next says why
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	e, err := c.Client.Next(ctx)
	return e.Response, err
}

// adsClient is a raw SotW ADS client of a relay; it ACKs every response.
type adsClient struct{ clientBase }

// dialADS dials addr as node id of cluster (locality region r-CLUSTER).
// It is closed when the test ends.
func dialADS(t *testing.T, ctx context.Context, addr, id, cluster string) *adsClient {
	t.Helper()
	node := &corev3.Node{Id: id, Cluster: cluster, Locality: &corev3.Locality{Region: "r-" + cluster}}
	return &adsClient{dialClient(t, ctx, addr, xdstest.Options{Node: node, ADS: true})}
}

// Subscribe requests exactly names of typeURL (none: the legacy wildcard,
// on a type that had no names yet).
func (c *adsClient) Subscribe(typeURL string, names ...string) {
	c.t.Helper()
	if err := c.SendSotW(typeURL, names); err != nil {
		c.t.Fatalf("%s: subscribe %s: %v", c.node.GetId(), typeURL, err)
	}
}

// Next returns the next response, failing the test if the stream ends or
// nothing arrives within timeout.
func (c *adsClient) Next(timeout time.Duration) *discoveryv3.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.next(timeout)
	if err != nil {
		c.t.Fatalf("%s: %v", c.node.GetId(), err)
	}
	return resp
}

func (c *adsClient) next(timeout time.Duration) (*discoveryv3.DiscoveryResponse, error) {
	e, err := c.event(timeout)
	if err != nil {
		return nil, err
	}
	return e.Response.(*discoveryv3.DiscoveryResponse), nil
}

// deltaADS is a raw delta ADS client of a relay; it ACKs every response.
type deltaADS struct{ clientBase }

// dialDelta dials addr as node id of cluster. It is closed when the test
// ends.
func dialDelta(t *testing.T, ctx context.Context, addr, id, cluster string) *deltaADS {
	t.Helper()
	node := &corev3.Node{Id: id, Cluster: cluster}
	return &deltaADS{dialClient(t, ctx, addr, xdstest.Options{Node: node, ADS: true, Delta: true})}
}

// Subscribe subscribes to names of typeURL ("*" for the wildcard).
func (c *deltaADS) Subscribe(typeURL string, names ...string) {
	c.t.Helper()
	if err := c.SendDelta(typeURL, names, nil); err != nil {
		c.t.Fatalf("%s: subscribe %s: %v", c.node.GetId(), typeURL, err)
	}
}

// Next returns the next response, failing the test if the stream ends or
// nothing arrives within timeout.
func (c *deltaADS) Next(timeout time.Duration) *discoveryv3.DeltaDiscoveryResponse {
	c.t.Helper()
	resp, ok := c.within(timeout)
	if !ok {
		c.t.Fatalf("%s: no delta response within %v", c.node.GetId(), timeout)
	}
	return resp
}

// within returns the next response, or false if none arrives within d; it
// fails the test if the stream ends.
func (c *deltaADS) within(d time.Duration) (*discoveryv3.DeltaDiscoveryResponse, bool) {
	c.t.Helper()
	e, err := c.event(d)
	if err != nil {
		if c.Err() != nil {
			c.t.Fatalf("%s: %v", c.node.GetId(), err)
		}
		return nil, false
	}
	return e.Response.(*discoveryv3.DeltaDiscoveryResponse), true
}

// Quiet fails the test if a response arrives within d.
func (c *deltaADS) Quiet(d time.Duration) {
	c.t.Helper()
	if resp, ok := c.within(d); ok {
		c.t.Fatalf("%s: unexpected response %v removed %v", c.node.GetId(), deltaResNames(resp), resp.GetRemovedResources())
	}
}
