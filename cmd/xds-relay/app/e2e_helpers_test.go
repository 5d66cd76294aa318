package app_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

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

// startRelay starts the relay in front of upstreamAddr, with a fast backoff.
// It is closed when the test ends.
func startRelay(t *testing.T, upstreamAddr string) *app.Relay {
	t.Helper()
	return startRelayAt(t, "127.0.0.1:0", upstreamAddr, relayID)
}

// startRelayAt starts a relay with id listening on listen (a previous
// relay's address may still be in the middle of being released).
func startRelayAt(t *testing.T, listen, upstreamAddr, id string) *app.Relay {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.Listen = listen
	cfg.Admin = "127.0.0.1:0"
	cfg.Upstream.Address = upstreamAddr
	cfg.Upstream.RelayID = id
	cfg.Upstream.Backoff.Initial = 50 * time.Millisecond
	cfg.Upstream.Backoff.Max = 500 * time.Millisecond
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).With(zap.String("relay", id))
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := app.Start(cfg, log)
		if err == nil {
			t.Cleanup(r.Close)
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("app.Start: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // retry pace while the port is released
	}
}

// clusterHash keys go-control-plane snapshots by node.cluster: the relay
// copies the class's cluster into the node it synthesizes.
type clusterHash struct{}

func (clusterHash) ID(n *corev3.Node) string { return n.GetCluster() }

// mgmtServer is a go-control-plane v0.14 ADS management server on loopback,
// recording the ADS streams it served.
type mgmtServer struct {
	Addr  string
	Cache cachev3.SnapshotCache

	srv      *grpc.Server
	cancel   context.CancelFunc
	served   chan struct{}
	stopOnce sync.Once

	mu     sync.Mutex
	opened int                    // ADS streams opened
	open   int                    // streams open now, SotW and delta
	nodes  map[int64]*corev3.Node // node of each stream's first request
	nacks  int                    // requests with error_detail
}

// startMgmt starts a management server listening on addr ("127.0.0.1:0" for
// any port, or a previous server's address to take its place). It is stopped
// when the test ends.
func startMgmt(t *testing.T, addr string) *mgmtServer {
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
	m := &mgmtServer{
		Addr:   lis.Addr().String(),
		Cache:  cachev3.NewSnapshotCache(false, clusterHash{}, nil),
		srv:    grpc.NewServer(),
		served: make(chan struct{}),
		nodes:  map[int64]*corev3.Node{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	count := func(d int) {
		m.mu.Lock()
		m.open += d
		m.mu.Unlock()
	}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, _ int64, typeURL string) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.open++
			if typeURL == resource.AnyType {
				m.opened++
			}
			return nil
		},
		StreamClosedFunc:      func(int64, *corev3.Node) { count(-1) },
		DeltaStreamOpenFunc:   func(context.Context, int64, string) error { count(1); return nil },
		DeltaStreamClosedFunc: func(int64, *corev3.Node) { count(-1) },
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			if _, ok := m.nodes[id]; !ok {
				m.nodes[id] = proto.Clone(req.GetNode()).(*corev3.Node)
			}
			if req.GetErrorDetail() != nil {
				m.nacks++
			}
			return nil
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

// Stop stops the server (every stream ends) and waits for Serve to return.
func (m *mgmtServer) Stop() {
	m.stopOnce.Do(func() {
		m.srv.Stop()
		m.cancel()
		<-m.served
	})
}

// Open returns how many streams (SotW and delta) are open now.
func (m *mgmtServer) Open() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.open
}

// Streams returns how many ADS streams were opened and the node of each
// stream's first request.
func (m *mgmtServer) Streams() (int, []*corev3.Node) {
	m.mu.Lock()
	defer m.mu.Unlock()
	nodes := make([]*corev3.Node, 0, len(m.nodes))
	for _, id := range slices.Sorted(maps.Keys(m.nodes)) {
		nodes = append(nodes, m.nodes[id])
	}
	return m.opened, nodes
}

// NACKs returns how many requests carried error_detail.
func (m *mgmtServer) NACKs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nacks
}

// Set installs a snapshot for a node class.
func (m *mgmtServer) Set(t *testing.T, class, version string, res map[resource.Type][]types.Resource) {
	t.Helper()
	snap, err := cachev3.NewSnapshot(version, res)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := m.Cache.SetSnapshot(context.Background(), class, snap); err != nil {
		t.Fatalf("set snapshot: %v", err)
	}
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
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			ResourceApiVersion:    corev3.ApiVersion_V3,
		}},
		LbPolicy: clusterv3.Cluster_ROUND_ROBIN,
	}
}

// eventually polls cond until it holds, failing the test if ctx ends first.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if !poll(ctx, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// poll checks cond every 10ms until it holds (true) or ctx ends (false).
func poll(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// getJSON fetches an admin endpoint and decodes its JSON body into v; it
// returns the raw body.
func getJSON(t *testing.T, ctx context.Context, url string, v any) []byte {
	t.Helper()
	body, code := get(t, ctx, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: not JSON: %v\n%s", url, err, body)
	}
	return body
}

// httpClient keeps no idle connections, so no goroutine outlives a request.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func get(t *testing.T, ctx context.Context, url string) ([]byte, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return body, resp.StatusCode
}

// upstreamState is one entry of /debug/upstream's streams.
type upstreamState struct {
	Class      string            `json:"class"`
	State      string            `json:"state"`
	LastError  string            `json:"last_error"`
	Reconnects int               `json:"reconnects"`
	ACKs       int               `json:"acks"`
	NACKs      int               `json:"nacks"`
	LastNACK   string            `json:"last_nack"`
	Versions   map[string]string `json:"versions"`
}

// upstreamStatus reads /debug/upstream and returns the class's stream.
func upstreamStatus(t *testing.T, ctx context.Context, r *app.Relay, class string) upstreamState {
	t.Helper()
	var out struct {
		Mode    string          `json:"mode"`
		Streams []upstreamState `json:"streams"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &out)
	for _, s := range out.Streams {
		if s.Class == class {
			return s
		}
	}
	return upstreamState{}
}
