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

// ControlPlane is a go-control-plane ADS server on loopback serving one
// snapshot per node cluster. It counts the ADS streams opened on it.
type ControlPlane struct {
	Addr string

	cache   cache.SnapshotCache
	grpcSrv *grpc.Server
	cancel  context.CancelFunc
	done    chan struct{}

	mu       sync.Mutex
	streams  int // guarded by mu
	requests int // guarded by mu
}

// StartControlPlane listens on 127.0.0.1:0 and serves ADS.
func StartControlPlane() (*ControlPlane, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Addr: lis.Addr().String(), cache: cache.NewSnapshotCache(false, byCluster{}, nil), done: make(chan struct{})}
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
	srv := server.NewServer(ctx, cp.cache, cb)
	cp.grpcSrv = grpc.NewServer(grpc.MaxConcurrentStreams(1 << 20))
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(cp.grpcSrv, srv)
	go func() {
		defer close(cp.done)
		_ = cp.grpcSrv.Serve(lis)
	}()
	return cp, nil
}

// SetClusters installs a snapshot of n EDS clusters for class. generation
// is written into every cluster (so a new generation changes them all) and
// changed names one cluster whose content differs from the previous
// generation's (-1: none).
func (cp *ControlPlane) SetClusters(class, version string, n int, changed int) error {
	res := make([]types.Resource, n)
	for i := range res {
		timeout := time.Second
		if i == changed {
			timeout = 2 * time.Second
		}
		res[i] = &clusterv3.Cluster{
			Name:                 fmt.Sprintf("cluster-%05d", i),
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
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.ClusterType: res})
	if err != nil {
		return err
	}
	return cp.cache.SetSnapshot(context.Background(), class, snap)
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
