package bench

import (
	"context"
	"fmt"
	"net"
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
// streams opened on it.
type ControlPlane struct {
	Addr string

	kind    string
	cache   cache.SnapshotCache // kind "snapshot"
	linear  *cache.LinearCache  // kind "linear"
	last    map[string]types.Resource
	grpcSrv *grpc.Server
	cancel  context.CancelFunc
	done    chan struct{}

	mu       sync.Mutex
	streams  int // guarded by mu
	requests int // guarded by mu
}

// StartControlPlane listens on 127.0.0.1:0 and serves ADS from a cache of
// kind "snapshot" or "linear".
func StartControlPlane(kind string) (*ControlPlane, error) {
	cp := &ControlPlane{kind: kind, done: make(chan struct{})}
	var c cache.Cache
	switch kind {
	case "snapshot":
		cp.cache = cache.NewSnapshotCache(false, byCluster{}, nil)
		c = cp.cache
	case "linear":
		cp.linear = cache.NewLinearCache(resource.ClusterType)
		c = cp.linear
	default:
		return nil, fmt.Errorf("unknown cache %q (want snapshot or linear)", kind)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cp.Addr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	cp.cancel = cancel
	cb := server.CallbackFuncs{
		StreamOpenFunc: func(context.Context, int64, string) error {
			cp.mu.Lock()
			cp.streams++
			cp.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(int64, *discoverygrpc.DiscoveryRequest) error {
			cp.mu.Lock()
			cp.requests++
			cp.mu.Unlock()
			return nil
		},
		DeltaStreamOpenFunc: func(context.Context, int64, string) error {
			cp.mu.Lock()
			cp.streams++
			cp.mu.Unlock()
			return nil
		},
		StreamDeltaRequestFunc: func(int64, *discoverygrpc.DeltaDiscoveryRequest) error {
			cp.mu.Lock()
			cp.requests++
			cp.mu.Unlock()
			return nil
		},
	}
	srv := server.NewServer(ctx, c, cb)
	cp.grpcSrv = grpc.NewServer(grpc.MaxConcurrentStreams(1 << 20))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(cp.grpcSrv, srv)
	go func() {
		defer close(cp.done)
		_ = cp.grpcSrv.Serve(lis)
	}()
	return cp, nil
}

// SetClusters installs n EDS clusters for class (the linear cache serves
// every class the same set). changed names one cluster whose content differs
// from the other generations' (-1: none). With the linear cache, a set that
// differs from the previous one in one cluster is installed as that one
// update (its per-resource path), as a control plane using it would.
func (cp *ControlPlane) SetClusters(class, version string, n int, changed int) error {
	res := make(map[string]types.Resource, n)
	for i := 0; i < n; i++ {
		res[clusterName(i)] = syntheticCluster(i, i == changed)
	}
	if cp.kind == "linear" {
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
		list = append(list, res[clusterName(i)])
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ClusterType: list})
	if err != nil {
		return err
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

// Stop stops the server and waits for it.
func (cp *ControlPlane) Stop() {
	cp.cancel()
	cp.grpcSrv.Stop()
	<-cp.done
}
