package xdstest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Cache kinds of a ControlPlane.
const (
	Snapshot    = "snapshot"     // snapshot cache, ADS mode off
	SnapshotADS = "snapshot-ads" // snapshot cache in ADS mode (holds named responses until every resource is named)
	Linear      = "linear"       // one linear cache per type, muxed by type URL
)

// CPOptions configure a ControlPlane.
type CPOptions struct {
	// Cache is Snapshot, SnapshotADS or Linear.
	Cache string
	// Addr to listen on; "" is 127.0.0.1:0.
	Addr string
	// NodeKey maps a node to its snapshot (snapshot caches only); nil maps
	// every node to one snapshot (Set installs it for everyone).
	NodeKey func(*corev3.Node) string
	// Heartbeat, when not zero, makes a snapshot cache re-send resources
	// that have a TTL at this interval (go-control-plane's heartbeating).
	Heartbeat time.Duration
	// ServerOptions are added to the gRPC server's (credentials, interceptors).
	ServerOptions []grpc.ServerOption
	// LRS, if set, is registered beside the xDS services, as a control
	// plane serving load reports on its xDS port (go-control-plane has no
	// LRS server; without one, LoadReportingService is UNIMPLEMENTED).
	LRS *LRSServer
}

type nodeHash func(*corev3.Node) string

func (h nodeHash) ID(n *corev3.Node) string { return h(n) }

// allNodes is the snapshot key of every node when CPOptions.NodeKey is nil.
const allNodes = "all"

// ControlPlane is a go-control-plane v0.14 management server on loopback
// serving SotW and delta, ADS and the four per-type services, from one
// cache. It holds the resource state it serves (one state for every node
// unless NodeKey says otherwise), can change it resource by resource, and
// can be restarted on the same address with the same cache, as a control
// plane that kept its state.
type ControlPlane struct {
	Addr string

	// Set at construction, read-only.
	opts   CPOptions
	snap   cachev3.SnapshotCache           // snapshot kinds
	linear map[string]*cachev3.LinearCache // Linear: type URL -> cache
	cache  cachev3.Cache
	stopHB context.CancelFunc // ends the heartbeat goroutine of the cache

	// Guarded by mu: the state served and the server's incarnation.
	mu       sync.Mutex
	state    map[string]map[string]types.Resource // type URL -> name -> resource
	version  int
	srv      *grpc.Server
	cancel   context.CancelFunc
	done     chan struct{} // closed when the incarnation's Serve returned; nil when down
	stats    CPStats
	sotwReq  []*discoveryv3.DiscoveryRequest      // the last maxRequests SotW requests
	deltaReq []*discoveryv3.DeltaDiscoveryRequest // the last maxRequests delta requests
	// One entry per stream served (both protocols, every incarnation).
	streams   map[streamKey]*streamRecord
	deltaSent []*discoveryv3.DeltaDiscoveryResponse // the last maxRequests delta responses
	sotwSent  []*discoveryv3.DiscoveryResponse      // the last maxRequests SotW responses
}

// streamKey names a stream: go-control-plane numbers SotW and delta streams
// apart, and anew in each incarnation.
type streamKey struct {
	incarnation int
	delta       bool
	id          int64
}

// streamRecord is what a stream's first requests said.
type streamRecord struct {
	node       *corev3.Node                                  // of its first request
	firstDelta map[string]*discoveryv3.DeltaDiscoveryRequest // type URL -> first delta request
}

// maxRequests bounds the requests a ControlPlane keeps per protocol.
const maxRequests = 4096

// CPStats counts what the control plane saw.
type CPStats struct {
	Streams, DeltaStreams int // streams opened (SotW, delta), over every incarnation
	Open                  int // streams open now (both protocols)
	Requests, NACKs       int // requests received (both protocols), and those with error_detail
	incarnation           int // Up calls that served, for streamKey
}

// StartControlPlane starts a control plane; it runs until Stop.
func StartControlPlane(opts CPOptions) (*ControlPlane, error) {
	cp := &ControlPlane{opts: opts, state: map[string]map[string]types.Resource{}, streams: map[streamKey]*streamRecord{}}
	key := opts.NodeKey
	if key == nil {
		key = func(*corev3.Node) string { return allNodes }
	}
	switch opts.Cache {
	case Snapshot, SnapshotADS:
		if opts.Heartbeat > 0 {
			ctx, cancel := context.WithCancel(context.Background())
			cp.stopHB = cancel
			cp.snap = cachev3.NewSnapshotCacheWithHeartbeating(ctx, opts.Cache == SnapshotADS, nodeHash(key), nil, opts.Heartbeat)
		} else {
			cp.snap = cachev3.NewSnapshotCache(opts.Cache == SnapshotADS, nodeHash(key), nil)
		}
		cp.cache = cp.snap
	case Linear:
		cp.linear = map[string]*cachev3.LinearCache{}
		caches := map[string]cachev3.Cache{}
		for _, t := range Types {
			lc := cachev3.NewLinearCache(t)
			cp.linear[t], caches[t] = lc, lc
		}
		cp.cache = &cachev3.MuxCache{
			Classify:      func(r *cachev3.Request) string { return r.GetTypeUrl() },
			ClassifyDelta: func(r *cachev3.DeltaRequest) string { return r.GetTypeUrl() },
			Caches:        caches,
		}
	default:
		return nil, fmt.Errorf("xdstest: unknown cache %q (want %s, %s or %s)", opts.Cache, Snapshot, SnapshotADS, Linear)
	}
	var lis net.Listener
	var err error
	if opts.Addr == "" {
		lis, err = listenOutsideEphemeral()
	} else {
		lis, err = listenRetry(opts.Addr, 5*time.Second)
	}
	if err != nil {
		cp.stopHeartbeat()
		return nil, err
	}
	cp.Addr = lis.Addr().String()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.snap != nil {
		if err := cp.publishLocked(); err != nil { // an empty snapshot: every type exists, empty
			_ = lis.Close()
			cp.stopHeartbeat()
			return nil, err
		}
	}
	cp.serveLocked(lis)
	return cp, nil
}

func (cp *ControlPlane) serveLocked(lis net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	cp.stats.incarnation++
	inc := cp.stats.incarnation
	count := func(f func(*CPStats)) {
		cp.mu.Lock()
		f(&cp.stats)
		cp.mu.Unlock()
	}
	// record returns the stream's record, under mu.
	record := func(delta bool, id int64, node *corev3.Node) *streamRecord {
		k := streamKey{inc, delta, id}
		rec := cp.streams[k]
		if rec == nil {
			rec = &streamRecord{node: proto.Clone(node).(*corev3.Node), firstDelta: map[string]*discoveryv3.DeltaDiscoveryRequest{}}
			cp.streams[k] = rec
		}
		return rec
	}
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(context.Context, int64, string) error {
			count(func(s *CPStats) { s.Streams++; s.Open++ })
			return nil
		},
		StreamClosedFunc: func(int64, *corev3.Node) { count(func(s *CPStats) { s.Open-- }) },
		DeltaStreamOpenFunc: func(context.Context, int64, string) error {
			count(func(s *CPStats) { s.DeltaStreams++; s.Open++ })
			return nil
		},
		DeltaStreamClosedFunc: func(int64, *corev3.Node) { count(func(s *CPStats) { s.Open-- }) },
		StreamRequestFunc: func(id int64, r *discoveryv3.DiscoveryRequest) error {
			r = proto.Clone(r).(*discoveryv3.DiscoveryRequest)
			cp.mu.Lock()
			defer cp.mu.Unlock()
			cp.stats.Requests++
			cp.stats.NACKs += boolInt(r.GetErrorDetail() != nil)
			cp.sotwReq = appendBounded(cp.sotwReq, r)
			record(false, id, r.GetNode())
			return nil
		},
		StreamDeltaRequestFunc: func(id int64, r *discoveryv3.DeltaDiscoveryRequest) error {
			r = proto.Clone(r).(*discoveryv3.DeltaDiscoveryRequest)
			cp.mu.Lock()
			defer cp.mu.Unlock()
			cp.stats.Requests++
			cp.stats.NACKs += boolInt(r.GetErrorDetail() != nil)
			cp.deltaReq = appendBounded(cp.deltaReq, r)
			if rec := record(true, id, r.GetNode()); rec.firstDelta[r.GetTypeUrl()] == nil {
				rec.firstDelta[r.GetTypeUrl()] = r
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, r *discoveryv3.DiscoveryResponse) {
			r = proto.Clone(r).(*discoveryv3.DiscoveryResponse)
			cp.mu.Lock()
			defer cp.mu.Unlock()
			cp.sotwSent = appendBounded(cp.sotwSent, r)
		},
		StreamDeltaResponseFunc: func(_ int64, _ *discoveryv3.DeltaDiscoveryRequest, r *discoveryv3.DeltaDiscoveryResponse) {
			r = proto.Clone(r).(*discoveryv3.DeltaDiscoveryResponse)
			cp.mu.Lock()
			defer cp.mu.Unlock()
			cp.deltaSent = appendBounded(cp.deltaSent, r)
		},
	}
	xds := serverv3.NewServer(ctx, cp.cache, cb)
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxConcurrentStreams(1 << 20)}, cp.opts.ServerOptions...)...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(srv, xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(srv, xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(srv, xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(srv, xds)
	routeservice.RegisterRouteDiscoveryServiceServer(srv, xds)
	if cp.opts.LRS != nil {
		cp.opts.LRS.Register(srv)
	}
	done := make(chan struct{})
	cp.srv, cp.cancel, cp.done = srv, cancel, done
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
}

func appendBounded[T any](s []T, v T) []T {
	if len(s) == maxRequests {
		s = s[1:]
	}
	return append(s, v)
}

// Requests returns the last requests received (up to 4096 per protocol),
// oldest first, as go-control-plane's callbacks saw them (the server has
// copied the stream's node into each).
func (cp *ControlPlane) Requests() ([]*discoveryv3.DiscoveryRequest, []*discoveryv3.DeltaDiscoveryRequest) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.sotwReq), slices.Clone(cp.deltaReq)
}

// Nodes returns the node of each stream's first request, both protocols,
// in the order the streams opened.
func (cp *ControlPlane) Nodes() []*corev3.Node {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []*corev3.Node
	for _, k := range cp.streamKeysLocked() {
		out = append(out, cp.streams[k].node)
	}
	return out
}

// FirstDelta returns the first delta request of typeURL of every delta
// stream that sent one, in the order the streams opened.
func (cp *ControlPlane) FirstDelta(typeURL string) []*discoveryv3.DeltaDiscoveryRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []*discoveryv3.DeltaDiscoveryRequest
	for _, k := range cp.streamKeysLocked() {
		if r := cp.streams[k].firstDelta[typeURL]; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// SotwSent returns the last SotW responses sent (up to 4096), oldest first.
func (cp *ControlPlane) SotwSent() []*discoveryv3.DiscoveryResponse {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.sotwSent)
}

// DeltaSent returns the last delta responses sent (up to 4096), oldest first.
func (cp *ControlPlane) DeltaSent() []*discoveryv3.DeltaDiscoveryResponse {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.deltaSent)
}

func (cp *ControlPlane) streamKeysLocked() []streamKey {
	return slices.SortedFunc(maps.Keys(cp.streams), func(a, b streamKey) int {
		if a.incarnation != b.incarnation {
			return a.incarnation - b.incarnation
		}
		if a.delta != b.delta {
			return boolInt(a.delta) - boolInt(b.delta)
		}
		return int(a.id - b.id)
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Set installs (adds or changes) resources of typeURL.
func (cp *ControlPlane) Set(typeURL string, rs ...types.Resource) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.state[typeURL] == nil {
		cp.state[typeURL] = map[string]types.Resource{}
	}
	upd := map[string]types.Resource{}
	for _, r := range rs {
		name := cachev3.GetResourceName(r)
		cp.state[typeURL][name], upd[name] = r, r
	}
	if cp.linear != nil {
		return cp.linear[typeURL].UpdateResources(upd, nil)
	}
	return cp.publishLocked()
}

// Delete removes names of typeURL (names not held are ignored).
func (cp *ControlPlane) Delete(typeURL string, names ...string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var del []string
	for _, n := range names {
		if _, ok := cp.state[typeURL][n]; ok {
			delete(cp.state[typeURL], n)
			del = append(del, n)
		}
	}
	if len(del) == 0 {
		return nil
	}
	if cp.linear != nil {
		return cp.linear[typeURL].UpdateResources(nil, del)
	}
	return cp.publishLocked()
}

// publishLocked installs the state as a new snapshot version.
func (cp *ControlPlane) publishLocked() error {
	cp.version++
	res := map[resource.Type][]types.Resource{}
	for _, t := range Types {
		list := []types.Resource{}
		for _, name := range slices.Sorted(maps.Keys(cp.state[t])) {
			list = append(list, cp.state[t][name])
		}
		res[t] = list
	}
	snap, err := cachev3.NewSnapshot(strconv.Itoa(cp.version), res)
	if err != nil {
		return err
	}
	return cp.SetSnapshot(allNodes, snap)
}

// SetSnapshot installs snap for the node key (snapshot caches only), for
// tests that key snapshots by node themselves.
func (cp *ControlPlane) SetSnapshot(key string, snap *cachev3.Snapshot) error {
	if cp.snap == nil {
		return fmt.Errorf("xdstest: SetSnapshot needs a snapshot cache, not %q", cp.opts.Cache)
	}
	return cp.snap.SetSnapshot(context.Background(), key, snap)
}

// SetResources installs res as version for the node key (snapshot caches
// only): SetSnapshot with the snapshot built.
func (cp *ControlPlane) SetResources(key, version string, res map[resource.Type][]types.Resource) error {
	snap, err := cachev3.NewSnapshot(version, res)
	if err != nil {
		return err
	}
	return cp.SetSnapshot(key, snap)
}

// Stats returns what the control plane counted so far.
func (cp *ControlPlane) Stats() CPStats {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.stats
}

// Down stops serving (every stream ends, the port is released); the cache
// keeps its state. No-op when down.
func (cp *ControlPlane) Down() {
	cp.mu.Lock()
	srv, cancel, done := cp.srv, cp.cancel, cp.done
	cp.done = nil
	cp.mu.Unlock()
	if done == nil {
		return
	}
	cancel()
	srv.Stop()
	<-done
}

// Up serves again on the same address with the same cache, retrying the
// listen for up to timeout while the port is released. No-op when up.
func (cp *ControlPlane) Up(timeout time.Duration) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.done != nil {
		return nil
	}
	lis, err := listenRetry(cp.Addr, timeout)
	if err != nil {
		return fmt.Errorf("xdstest: listen again: %w", err)
	}
	cp.serveLocked(lis)
	return nil
}

// listenRetry listens on addr, retrying for up to timeout while a previous
// server releases the port.
func listenRetry(addr string, timeout time.Duration) (net.Listener, error) {
	deadline := time.Now().Add(timeout)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return lis, err
		}
		time.Sleep(10 * time.Millisecond) // retry pace while the port is released
	}
}

// Restart is Down then Up: every stream ends and clients reconnect to the
// same state.
func (cp *ControlPlane) Restart() error {
	cp.Down()
	return cp.Up(5 * time.Second)
}

// Stop stops the server and the cache's heartbeats for good.
func (cp *ControlPlane) Stop() {
	cp.Down()
	releasePort(cp.Addr)
	cp.stopHeartbeat()
}

func (cp *ControlPlane) stopHeartbeat() {
	if cp.stopHB != nil {
		cp.stopHB()
	}
}
