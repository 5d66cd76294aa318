package bench

import (
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
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
	return t.Server.StreamAggregatedResources(newTimed(t.cp, st, (*discoverygrpc.DiscoveryRequest).GetNode,
		(*discoverygrpc.DiscoveryResponse).GetTypeUrl, (*discoverygrpc.DiscoveryResponse).GetVersionInfo))
}

func (t timedADS) DeltaAggregatedResources(st discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return t.Server.DeltaAggregatedResources(newTimed(t.cp, st, (*discoverygrpc.DeltaDiscoveryRequest).GetNode,
		(*discoverygrpc.DeltaDiscoveryResponse).GetTypeUrl, (*discoverygrpc.DeltaDiscoveryResponse).GetSystemVersionInfo))
}

// timedStream is one ADS stream, SotW or delta, that learns its class from
// its first request's node (go-control-plane's server reads and sends on
// different goroutines) and notes when each response was sent.
type timedStream[Req, Resp any] struct {
	// Set at construction, read-only: the stream, the control plane and
	// the protocol's accessors.
	grpc.BidiStreamingServer[Req, Resp]
	cp               *ControlPlane
	node             func(*Req) *corev3.Node
	typeURL, version func(*Resp) string

	class classOnce // atomic: learned by Recv, read by Send
}

func newTimed[Req, Resp any](cp *ControlPlane, st grpc.BidiStreamingServer[Req, Resp], node func(*Req) *corev3.Node, typeURL, version func(*Resp) string) *timedStream[Req, Resp] {
	return &timedStream[Req, Resp]{BidiStreamingServer: st, cp: cp, node: node, typeURL: typeURL, version: version}
}

func (s *timedStream[Req, Resp]) Recv() (*Req, error) {
	req, err := s.BidiStreamingServer.Recv()
	if err == nil {
		s.class.learn(s.node(req).GetCluster())
	}
	return req, err
}

func (s *timedStream[Req, Resp]) Send(resp *Resp) error {
	err := s.BidiStreamingServer.Send(resp)
	if err == nil {
		s.cp.recordSent(sentKey{s.class.get(), s.typeURL(resp), s.version(resp)}, time.Now())
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
