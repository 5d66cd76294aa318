package bench

import (
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
)

// dependencies returns the names a resource makes a proxy subscribe to, as
// Envoy and gRPC follow the chain: a listener's RDS route configurations, an
// EDS cluster's service name (its own name when unset). Undecodable bytes
// have none.
func dependencies(typeURL string, encoded []byte) []string {
	switch typeURL {
	case ListenerType:
		var l listenerv3.Listener
		if proto.Unmarshal(encoded, &l) != nil {
			return nil
		}
		var out []string
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				if n := hcm.GetRds().GetRouteConfigName(); n != "" {
					out = append(out, n)
				}
			}
		}
		return out
	case ClusterType:
		var c clusterv3.Cluster
		if proto.Unmarshal(encoded, &c) != nil || c.GetType() != clusterv3.Cluster_EDS {
			return nil
		}
		if n := c.GetEdsClusterConfig().GetServiceName(); n != "" {
			return []string{n}
		}
		return []string{c.GetName()}
	}
	return nil
}

// depCache memoises dependencies by content hash, shared by all clients:
// the clients of a class receive the same bytes, so each distinct resource
// is decoded once.
type depCache struct {
	mu sync.Mutex
	m  map[uint64][]string // guarded by mu
}

func newDepCache() *depCache { return &depCache{m: map[uint64][]string{}} }

// of returns the dependencies of a resource of typeURL with content hash h
// and bytes encoded.
func (d *depCache) of(typeURL string, h uint64, encoded []byte) []string {
	if typeURL != ListenerType && typeURL != ClusterType {
		return nil
	}
	d.mu.Lock()
	deps, ok := d.m[h]
	d.mu.Unlock()
	if ok {
		return deps
	}
	deps = dependencies(typeURL, encoded)
	d.mu.Lock()
	d.m[h] = deps
	d.mu.Unlock()
	return deps
}
