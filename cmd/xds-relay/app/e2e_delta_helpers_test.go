package app_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// deltaMgmt is a go-control-plane v0.14 management server (snapshot cache
// keyed by node.cluster) serving SotW and delta ADS, counting the streams of
// each protocol and recording each delta stream's first request per type.
type deltaMgmt struct {
	Addr  string
	Cache cachev3.SnapshotCache

	srv      *grpc.Server
	cancel   context.CancelFunc
	served   chan struct{}
	stopOnce sync.Once

	mu    sync.Mutex
	sotw  int                                                     // SotW streams opened
	delta int                                                     // delta streams opened
	first map[int64]map[string]*discoveryv3.DeltaDiscoveryRequest // stream -> type -> first request
	sent  []string                                                // delta responses, as "type: names -removed"
}

func startDeltaMgmt(t *testing.T, addr string) *deltaMgmt {
	t.Helper()
	var lis net.Listener
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("listen %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // port still held by the previous server
	}
	m := &deltaMgmt{
		Addr:   lis.Addr().String(),
		Cache:  cachev3.NewSnapshotCache(false, clusterHash{}, nil),
		srv:    grpc.NewServer(),
		served: make(chan struct{}),
		first:  map[int64]map[string]*discoveryv3.DeltaDiscoveryRequest{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(context.Context, int64, string) error {
			m.mu.Lock()
			m.sotw++
			m.mu.Unlock()
			return nil
		},
		DeltaStreamOpenFunc: func(context.Context, int64, string) error {
			m.mu.Lock()
			m.delta++
			m.mu.Unlock()
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.first[id] == nil {
				m.first[id] = map[string]*discoveryv3.DeltaDiscoveryRequest{}
			}
			if _, ok := m.first[id][req.GetTypeUrl()]; !ok {
				m.first[id][req.GetTypeUrl()] = proto.Clone(req).(*discoveryv3.DeltaDiscoveryRequest)
			}
			return nil
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			m.mu.Lock()
			defer m.mu.Unlock()
			removed := slices.Sorted(slices.Values(resp.GetRemovedResources()))
			m.sent = append(m.sent, fmt.Sprintf("%s: %v -%v", resp.GetTypeUrl(), deltaResNames(resp), removed))
		},
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(m.srv, serverv3.NewServer(ctx, m.Cache, cb))
	go func() {
		defer close(m.served)
		_ = m.srv.Serve(lis)
	}()
	t.Cleanup(m.Stop)
	return m
}

func (m *deltaMgmt) Stop() {
	m.stopOnce.Do(func() {
		m.srv.Stop()
		m.cancel()
		<-m.served
	})
}

// Streams returns how many SotW and delta streams were opened.
func (m *deltaMgmt) Streams() (sotw, delta int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sotw, m.delta
}

// FirstRequests returns the first delta request of typeURL of every stream,
// by stream id.
func (m *deltaMgmt) FirstRequests(typeURL string) []*discoveryv3.DeltaDiscoveryRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*discoveryv3.DeltaDiscoveryRequest
	for _, id := range slices.Sorted(maps.Keys(m.first)) {
		if r := m.first[id][typeURL]; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Sent returns the delta responses sent, as "type: [names] -[removed]".
func (m *deltaMgmt) Sent() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sent)
}

func (m *deltaMgmt) Set(t *testing.T, class, version string, res map[resource.Type][]types.Resource) {
	t.Helper()
	snap, err := cachev3.NewSnapshot(version, res)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := m.Cache.SetSnapshot(context.Background(), class, snap); err != nil {
		t.Fatalf("set snapshot: %v", err)
	}
}

// startRelayProto starts a relay speaking protocol ("sotw" or "delta") to
// upstreamAddr, presenting id. It is closed when the test ends.
func startRelayProto(t *testing.T, upstreamAddr, id, protocol string) *app.Relay {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	cfg.Upstream.Address = upstreamAddr
	cfg.Upstream.RelayID = id
	cfg.Upstream.Protocol = protocol
	cfg.Upstream.Backoff.Initial = 50 * time.Millisecond
	cfg.Upstream.Backoff.Max = 500 * time.Millisecond
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).With(zap.String("relay", id)))
	if err != nil {
		t.Fatalf("app.Start: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// timedCluster is an EDS cluster whose content depends on secs: change secs
// to change the cluster.
func timedCluster(name string, secs int64) *clusterv3.Cluster {
	c := edsCluster(name)
	c.ConnectTimeout = durationpb.New(time.Duration(secs) * time.Second)
	return c
}

func cds(cs ...*clusterv3.Cluster) []types.Resource {
	out := make([]types.Resource, 0, len(cs))
	for _, c := range cs {
		out = append(out, c)
	}
	return out
}

func loadAssignments(names ...string) []types.Resource {
	out := make([]types.Resource, 0, len(names))
	for _, n := range names {
		out = append(out, &endpointv3.ClusterLoadAssignment{ClusterName: n})
	}
	return out
}

// deltaADS is a raw delta ADS client of a relay. It ACKs every response and
// queues it for the test.
type deltaADS struct {
	t      *testing.T
	node   *corev3.Node
	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]
	cancel context.CancelFunc
	resps  chan *discoveryv3.DeltaDiscoveryResponse
	done   chan struct{}
	err    error // set before done is closed

	sendMu sync.Mutex
	first  bool // guarded by sendMu
}

func dialDelta(t *testing.T, ctx context.Context, addr, id, cluster string) *deltaADS {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		t.Fatalf("open delta ADS stream: %v", err)
	}
	c := &deltaADS{t: t, node: &corev3.Node{Id: id, Cluster: cluster}, conn: conn, stream: stream, cancel: cancel,
		resps: make(chan *discoveryv3.DeltaDiscoveryResponse, 16), done: make(chan struct{}), first: true}
	go c.receive(sctx)
	t.Cleanup(c.Close)
	return c
}

func (c *deltaADS) receive(ctx context.Context) {
	defer close(c.done)
	for {
		resp, err := c.stream.Recv()
		if err != nil {
			c.err = err
			return
		}
		if err := c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			c.err = fmt.Errorf("ACK: %w", err)
			return
		}
		select {
		case c.resps <- resp:
		case <-ctx.Done():
			c.err = ctx.Err()
			return
		}
	}
}

func (c *deltaADS) send(req *discoveryv3.DeltaDiscoveryRequest) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.first {
		req.Node, c.first = c.node, false
	}
	return c.stream.Send(req)
}

// Subscribe subscribes to names of typeURL ("*" for the wildcard).
func (c *deltaADS) Subscribe(typeURL string, names ...string) {
	c.t.Helper()
	if err := c.send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResourceNamesSubscribe: names}); err != nil {
		c.t.Fatalf("%s: subscribe %s: %v", c.node.GetId(), typeURL, err)
	}
}

// Next returns the next response, failing the test if the stream ends or
// nothing arrives within timeout.
func (c *deltaADS) Next(timeout time.Duration) *discoveryv3.DeltaDiscoveryResponse {
	c.t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case resp := <-c.resps:
		return resp
	case <-c.done:
		c.t.Fatalf("%s: stream ended: %v", c.node.GetId(), c.err)
	case <-timer.C:
		c.t.Fatalf("%s: no delta response within %v", c.node.GetId(), timeout)
	}
	return nil
}

// Quiet fails the test if a response arrives within d.
func (c *deltaADS) Quiet(d time.Duration) {
	c.t.Helper()
	select {
	case resp := <-c.resps:
		c.t.Fatalf("%s: unexpected response %v removed %v", c.node.GetId(), deltaResNames(resp), resp.GetRemovedResources())
	case <-c.done:
		c.t.Fatalf("%s: stream ended: %v", c.node.GetId(), c.err)
	case <-time.After(d):
	}
}

// Err returns the stream's error if it has ended, else nil.
func (c *deltaADS) Err() error {
	select {
	case <-c.done:
		return fmt.Errorf("stream ended: %w", c.err)
	default:
		return nil
	}
}

func (c *deltaADS) Close() {
	c.cancel()
	<-c.done
	_ = c.conn.Close()
}

// deltaResNames returns the sorted names of a delta response's resources.
func deltaResNames(resp *discoveryv3.DeltaDiscoveryResponse) []string {
	out := make([]string, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		out = append(out, r.GetName())
	}
	slices.Sort(out)
	return out
}

// wantDeltaResp checks a delta response of typeURL carries exactly names
// and removes exactly removed.
func wantDeltaResp(t *testing.T, resp *discoveryv3.DeltaDiscoveryResponse, typeURL string, names, removed []string) {
	t.Helper()
	gotRemoved := slices.Sorted(slices.Values(resp.GetRemovedResources()))
	if resp.GetTypeUrl() != typeURL || !slices.Equal(deltaResNames(resp), names) || !slices.Equal(gotRemoved, removed) {
		t.Fatalf("delta %s response has %v removed %v, want %s %v removed %v",
			resp.GetTypeUrl(), deltaResNames(resp), gotRemoved, typeURL, names, removed)
	}
}

// connectTimeouts decodes a SotW CDS response: name -> connect timeout (s).
func connectTimeouts(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, a := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		out[c.GetName()] = c.GetConnectTimeout().GetSeconds()
	}
	return out
}

// oneUpstreamStream checks the relay's /debug/upstream lists exactly one
// stream, for class, connected, never restarted.
func oneUpstreamStream(t *testing.T, ctx context.Context, r *app.Relay, class string) {
	t.Helper()
	var out struct {
		Protocol string          `json:"protocol"`
		Streams  []upstreamState `json:"streams"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &out)
	if len(out.Streams) != 1 || out.Streams[0].Class != class || out.Streams[0].State != "connected" || out.Streams[0].Reconnects != 0 {
		t.Fatalf("relay %s (%s upstream): /debug/upstream streams %+v, want one connected stream of %s without reconnects",
			r.Addr(), out.Protocol, out.Streams, class)
	}
}
