package bench

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// byCluster maps a node to its snapshot by node.cluster: the relay presents
// each class with the cluster of the class's first node.
type byCluster struct{}

func (byCluster) ID(n *corev3.Node) string { return n.GetCluster() }

// ControlPlane is a go-control-plane ADS server on loopback serving CDS from
// either cache: "snapshot" (one snapshot per node cluster) or "linear" (one
// resource set for every node, updated per resource). It counts the ADS
// streams opened on it. It can be taken down and brought back on the same
// address with the same cache (Down, Up), as a restarted control plane that
// kept its state.
type ControlPlane struct {
	Addr string

	// Set at construction (pace by SetPace, before any use), read-only.
	kind   string
	pace   time.Duration       // between classes in SetClasses (pace.go)
	cache  cache.SnapshotCache // kind "snapshot"
	linear *cache.LinearCache  // kind "linear"
	last   map[string]types.Resource

	// Owned by the caller of Up/Down/Stop (not concurrent with each other).
	grpcSrv *grpc.Server
	cancel  context.CancelFunc
	done    chan struct{} // closed when the current incarnation's Serve returned; nil when down

	mu          sync.Mutex
	streams     int                  // guarded by mu
	requests    int                  // guarded by mu
	incarnation []int                // guarded by mu: ADS streams opened on each incarnation (Up)
	sent        map[sentKey]sentTime // guarded by mu: when each response was sent (SentAt)

	setMu       sync.Mutex             // one SetClasses/SetAssignment at a time
	states      map[string]*classState // guarded by setMu: the snapshot cache's per-class state
	installedAt []time.Time            // guarded by setMu: the last paced SetClasses's instants
}

// classState is what SetClasses and SetAssignment last installed for a
// class, so that each can replace its own type and keep the other's version
// (a CDS watch must not fire on an EDS-only change).
type classState struct {
	clusters cache.Resources
	eds      *cache.Resources // nil: the class has no load assignment
}

// sentKey names one response the control plane sent: node class, type URL
// and version (the snapshot's version of that type; a delta response's
// system version).
type sentKey struct{ class, typeURL, version string }

// sentTime is when the first response of a sentKey was handed to gRPC
// (Send returned); later sends of the same key are counted, not timed.
type sentTime struct {
	at    time.Time
	count int
}

// StartControlPlane listens on 127.0.0.1:0 and serves ADS from a cache of
// kind "snapshot" or "linear".
func StartControlPlane(kind string) (*ControlPlane, error) {
	cp := &ControlPlane{kind: kind}
	switch kind {
	case "snapshot":
		cp.cache = cache.NewSnapshotCache(false, byCluster{}, nil)
	case "linear":
		cp.linear = cache.NewLinearCache(resource.ClusterType)
	default:
		return nil, fmt.Errorf("unknown cache %q (want snapshot or linear)", kind)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cp.Addr = lis.Addr().String()
	cp.serve(lis)
	return cp, nil
}

// serve starts an incarnation of the gRPC server on lis, over the cache.
func (cp *ControlPlane) serve(lis net.Listener) {
	var c cache.Cache = cp.cache
	if cp.kind == "linear" {
		c = cp.linear
	}
	ctx, cancel := context.WithCancel(context.Background())
	cp.cancel = cancel
	cp.mu.Lock()
	cp.incarnation = append(cp.incarnation, 0)
	inc := len(cp.incarnation) - 1
	cp.mu.Unlock()
	opened := func(context.Context, int64, string) error {
		cp.mu.Lock()
		cp.streams++
		cp.incarnation[inc]++
		cp.mu.Unlock()
		return nil
	}
	requested := func() error {
		cp.mu.Lock()
		cp.requests++
		cp.mu.Unlock()
		return nil
	}
	cb := server.CallbackFuncs{
		StreamOpenFunc:         opened,
		DeltaStreamOpenFunc:    opened,
		StreamRequestFunc:      func(int64, *discoverygrpc.DiscoveryRequest) error { return requested() },
		StreamDeltaRequestFunc: func(int64, *discoverygrpc.DeltaDiscoveryRequest) error { return requested() },
	}
	srv := server.NewServer(ctx, c, cb)
	cp.grpcSrv = grpc.NewServer(grpc.MaxConcurrentStreams(1 << 20))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(cp.grpcSrv, timedADS{Server: srv, cp: cp})
	done := make(chan struct{})
	cp.done = done
	go func() {
		defer close(done)
		_ = cp.grpcSrv.Serve(lis)
	}()
}

// Down stops serving (every stream ends, the port is released); the cache
// keeps its state. No-op when already down.
func (cp *ControlPlane) Down() {
	if cp.done == nil {
		return
	}
	cp.cancel()
	cp.grpcSrv.Stop()
	<-cp.done
	cp.done = nil
}

// Up serves again on the same address with the same cache, retrying the
// listen for up to timeout (the port may linger). No-op when up.
func (cp *ControlPlane) Up(timeout time.Duration) error {
	if cp.done != nil {
		return nil
	}
	deadline := time.Now().Add(timeout)
	for {
		lis, err := net.Listen("tcp", cp.Addr)
		if err == nil {
			cp.serve(lis)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("control plane: listen again on %s: %w", cp.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StreamsPerIncarnation returns the ADS streams opened on each incarnation
// of the server (the first, then one per Up).
func (cp *ControlPlane) StreamsPerIncarnation() []int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.incarnation)
}

// SetSnapshot installs a consistent snapshot of resources for class (kind
// "snapshot" only).
func (cp *ControlPlane) SetSnapshot(class, version string, res map[resource.Type][]types.Resource) error {
	if cp.cache == nil {
		return fmt.Errorf("control plane: SetSnapshot needs the snapshot cache, not %q", cp.kind)
	}
	snap, err := cache.NewSnapshot(version, res)
	if err != nil {
		return err
	}
	if err := snap.Consistent(); err != nil {
		return fmt.Errorf("control plane: class %s version %s: %w", class, version, err)
	}
	return cp.cache.SetSnapshot(context.Background(), class, snap)
}

// SetClusters installs n EDS clusters for class (the linear cache serves
// every class the same set). changed names one cluster whose content differs
// from the other generations' (-1: none). With the linear cache, a set that
// differs from the previous one in one cluster is installed as that one
// update (its per-resource path), as a control plane using it would.
func (cp *ControlPlane) SetClusters(class, version string, n int, changed int) error {
	return cp.setClass(Workload{Classes: 1, Clusters: n, Overlap: 1}, 0, class, version, changed)
}

// SetClasses installs version of every class of w (class k named
// className(k)): w.Clusters clusters, changed as in SetClusters. The linear
// cache serves one set to every class, so it takes a uniform workload only
// and is set once.
func (cp *ControlPlane) SetClasses(w Workload, version string, changed int) error {
	if cp.kind == "linear" {
		if !w.uniform() {
			return fmt.Errorf("control plane: the linear cache serves one set to every class; overlap %v needs the snapshot cache", w.Overlap)
		}
		return cp.SetClusters(className(0), version, w.Clusters, changed)
	}
	start := time.Now()
	var at []time.Time
	for k := range w.Classes {
		awaitTurn(start, k, cp.pace)
		if err := cp.setClass(w, k, className(k), version, changed); err != nil {
			return err
		}
		if cp.pace > 0 {
			at = append(at, time.Now())
		}
	}
	cp.setMu.Lock()
	cp.installedAt = at
	cp.setMu.Unlock()
	return nil
}

// InstalledAt is when the last SetClasses installed each class's snapshot
// when it was paced (SetPace); nil otherwise.
func (cp *ControlPlane) InstalledAt() []time.Time {
	cp.setMu.Lock()
	defer cp.setMu.Unlock()
	return cp.installedAt
}

// SetPace makes SetClasses install class k's state k × d after it began
// (pace.go); 0, the default, as fast as it can. Call it before any other
// method. The linear cache, which serves one set to every class, is set
// once: unpaced.
func (cp *ControlPlane) SetPace(d time.Duration) { cp.pace = d }

func (cp *ControlPlane) setClass(w Workload, k int, class, version string, changed int) error {
	n := w.Clusters
	if cp.kind == "linear" {
		res := make(map[string]types.Resource, n)
		for i := 0; i < n; i++ {
			res[clusterName(i)] = syntheticCluster(i, i == changed)
		}
		if cp.last == nil {
			cp.linear.SetResources(res)
		} else if changed >= 0 {
			if err := cp.linear.UpdateResource(clusterName(changed), res[clusterName(changed)]); err != nil {
				return err
			}
		}
		cp.last = res
		return nil
	}
	list := make([]types.Resource, 0, n)
	for i := 0; i < n; i++ {
		list = append(list, w.Cluster(k, i, i == changed))
	}
	cp.setMu.Lock()
	defer cp.setMu.Unlock()
	st := cp.state(class)
	st.clusters = cache.NewResources(version, list)
	return cp.install(class, st)
}

// SetAssignment installs update seq of class's churned load assignment
// (Assignment(seq), version "e" + seq), keeping its clusters (snapshot
// cache only).
func (cp *ControlPlane) SetAssignment(class string, seq int) error {
	if cp.cache == nil {
		return fmt.Errorf("control plane: load assignments need the snapshot cache, not %q", cp.kind)
	}
	cp.setMu.Lock()
	defer cp.setMu.Unlock()
	st := cp.state(class)
	eds := cache.NewResources(AssignmentVersion(seq), []types.Resource{Assignment(seq)})
	st.eds = &eds
	return cp.install(class, st)
}

// AssignmentVersion is the control plane's version of churn update seq.
func AssignmentVersion(seq int) string { return "e" + strconv.Itoa(seq) }

// state returns class's state, creating it. Called with setMu held.
func (cp *ControlPlane) state(class string) *classState {
	if cp.states == nil {
		cp.states = make(map[string]*classState)
	}
	st := cp.states[class]
	if st == nil {
		st = &classState{clusters: cache.NewResources("", nil)}
		cp.states[class] = st
	}
	return st
}

// install sets class's snapshot from st, each type with its own version.
// Called with setMu held.
func (cp *ControlPlane) install(class string, st *classState) error {
	snap := &cache.Snapshot{}
	snap.Resources[types.Cluster] = st.clusters
	if st.eds != nil {
		snap.Resources[types.Endpoint] = *st.eds
	}
	return cp.cache.SetSnapshot(context.Background(), class, snap)
}

func clusterName(i int) string { return fmt.Sprintf("cluster-%05d", i) }

// syntheticCluster is a realistic EDS cluster; changed gives it another
// connect timeout.
func syntheticCluster(i int, changed bool) *clusterv3.Cluster {
	timeout := time.Second
	if changed {
		timeout = 2 * time.Second
	}
	return &clusterv3.Cluster{
		Name:                 clusterName(i),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig: &corev3.ConfigSource{
				ResourceApiVersion:    corev3.ApiVersion_V3,
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
			},
			ServiceName: fmt.Sprintf("service-%05d.bench.svc.cluster.local", i),
		},
		ConnectTimeout: durationpb.New(timeout),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
	}
}

// Counts returns the ADS streams opened and requests received so far.
func (cp *ControlPlane) Counts() (streams, requests int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.streams, cp.requests
}

// SentAt returns when the control plane finished sending (gRPC's Send
// returned) the first response of version of typeURL to a stream of class,
// and how many such responses it sent.
func (cp *ControlPlane) SentAt(class, typeURL, version string) (time.Time, int) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	t := cp.sent[sentKey{class, typeURL, version}]
	return t.at, t.count
}

// recordSent notes that a response was sent; see SentAt.
func (cp *ControlPlane) recordSent(k sentKey, at time.Time) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.sent == nil {
		cp.sent = make(map[sentKey]sentTime)
	}
	t := cp.sent[k]
	if t.count == 0 {
		t.at = at
	}
	t.count++
	cp.sent[k] = t
}

// Stop stops the server and waits for it.
func (cp *ControlPlane) Stop() { cp.Down() }
