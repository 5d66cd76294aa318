package bench

import (
	"sync/atomic"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
)

// timedADS is go-control-plane's ADS server with every stream wrapped to
// note when each response was sent (ControlPlane.SentAt): the instant the
// upstream's own sending of a class's update ended, which the fan-out
// results take out of the time to the last client.
type timedADS struct {
	server.Server
	cp *ControlPlane
}

func (t timedADS) StreamAggregatedResources(st discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return t.Server.StreamAggregatedResources(&timedSotw{AggregatedDiscoveryService_StreamAggregatedResourcesServer: st, cp: t.cp})
}

func (t timedADS) DeltaAggregatedResources(st discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return t.Server.DeltaAggregatedResources(&timedDelta{AggregatedDiscoveryService_DeltaAggregatedResourcesServer: st, cp: t.cp})
}

// timedSotw learns the stream's class from its first request's node (go-
// control-plane's server reads and sends on different goroutines).
type timedSotw struct {
	discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	cp    *ControlPlane
	class classOnce
}

func (s *timedSotw) Recv() (*discoverygrpc.DiscoveryRequest, error) {
	req, err := s.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Recv()
	if err == nil {
		s.class.learn(req.GetNode().GetCluster())
	}
	return req, err
}

func (s *timedSotw) Send(resp *discoverygrpc.DiscoveryResponse) error {
	err := s.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Send(resp)
	if err == nil {
		s.cp.recordSent(sentKey{s.class.get(), resp.GetTypeUrl(), resp.GetVersionInfo()}, time.Now())
	}
	return err
}

type timedDelta struct {
	discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer
	cp    *ControlPlane
	class classOnce
}

func (s *timedDelta) Recv() (*discoverygrpc.DeltaDiscoveryRequest, error) {
	req, err := s.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Recv()
	if err == nil {
		s.class.learn(req.GetNode().GetCluster())
	}
	return req, err
}

func (s *timedDelta) Send(resp *discoverygrpc.DeltaDiscoveryResponse) error {
	err := s.AggregatedDiscoveryService_DeltaAggregatedResourcesServer.Send(resp)
	if err == nil {
		s.cp.recordSent(sentKey{s.class.get(), resp.GetTypeUrl(), resp.GetSystemVersionInfo()}, time.Now())
	}
	return err
}

// classOnce is a stream's node class: the first non-empty one its requests
// carry (later requests may omit the node).
type classOnce struct{ v atomic.Pointer[string] }

func (c *classOnce) learn(class string) {
	if class != "" && c.v.Load() == nil {
		c.v.Store(&class)
	}
}

func (c *classOnce) get() string {
	if p := c.v.Load(); p != nil {
		return *p
	}
	return ""
}
