package bench

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// dependentTypes are the types a proxy subscribes to by name.
var dependentTypes = []string{RouteType, EndpointType}

func isDependent(typeURL string) bool { return typeURL == RouteType || typeURL == EndpointType }

// serveSotW runs one state-of-the-world ADS stream (run goroutine).
func (c *ProxyClient) serveSotW(s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, node *corev3.Node) error {
	// Per type on this stream: the last version (kept across streams, as a
	// proxy re-sends it), the last nonce, whether a request was sent.
	if c.sotwVersions == nil {
		c.sotwVersions = map[string]string{}
	}
	nonces := map[string]string{}
	sent := map[string]bool{}
	request := func(typeURL string) error {
		req := &discoverygrpc.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: c.sotwVersions[typeURL], ResponseNonce: nonces[typeURL]}
		if isDependent(typeURL) {
			req.ResourceNames = c.subscribed(typeURL)
			if len(req.ResourceNames) == 0 && !sent[typeURL] {
				return nil // an empty first request would be the legacy wildcard
			}
		}
		if len(sent) == 0 {
			req.Node = node
		}
		sent[typeURL] = true
		return s.Send(req)
	}
	for _, t := range xdsTypes {
		if err := request(t); err != nil {
			return err
		}
	}
	for {
		var m wire.Raw
		if err := s.RecvMsg(&m); err != nil {
			return err
		}
		resp, err := wire.ParseResponse(m.Bytes)
		if err != nil {
			return err
		}
		c.responses.Add(1)
		entries := make([]entry, 0, len(resp.Resources))
		for _, a := range resp.Resources {
			_, value, err := wire.ParseAny(a)
			if err != nil {
				return err
			}
			name, err := wire.ResourceName(value)
			if err != nil {
				return fmt.Errorf("%s: %w", resp.TypeURL, err)
			}
			entries = append(entries, entry{name: name, value: value})
		}
		changes := c.apply(resp.TypeURL, entries, nil, !isDependent(resp.TypeURL))
		for _, t := range dependentTypes {
			if _, ok := changes[t]; ok {
				if err := request(t); err != nil {
					return err
				}
			}
		}
		c.sotwVersions[resp.TypeURL], nonces[resp.TypeURL] = resp.VersionInfo, resp.Nonce
		if err := request(resp.TypeURL); err != nil { // the ACK
			return err
		}
	}
}

// serveDelta runs one incremental ADS stream (run goroutine).
func (c *ProxyClient) serveDelta(s discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient, node *corev3.Node) error {
	first := true
	send := func(req *discoverygrpc.DeltaDiscoveryRequest) error {
		if first {
			req.Node, first = node, false
		}
		return s.Send(req)
	}
	for _, t := range xdsTypes {
		req := &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: c.versions(t)}
		if isDependent(t) {
			if req.ResourceNamesSubscribe = c.subscribed(t); len(req.ResourceNamesSubscribe) == 0 {
				continue
			}
		} else {
			req.ResourceNamesSubscribe = []string{"*"}
		}
		if err := send(req); err != nil {
			return err
		}
	}
	for {
		var m wire.Raw
		if err := s.RecvMsg(&m); err != nil {
			return err
		}
		resp, err := wire.ParseDeltaResponse(m.Bytes)
		if err != nil {
			return err
		}
		c.responses.Add(1)
		entries := make([]entry, 0, len(resp.Resources))
		for _, b := range resp.Resources {
			r, err := wire.ParseDeltaResource(b)
			if err != nil {
				return err
			}
			if r.Any == nil {
				continue // a TTL heartbeat
			}
			_, value, err := wire.ParseAny(r.Any)
			if err != nil {
				return err
			}
			entries = append(entries, entry{name: r.Name, version: r.Version, value: value})
		}
		changes := c.apply(resp.TypeURL, entries, resp.Removed, false)
		for _, t := range dependentTypes {
			if ch, ok := changes[t]; ok {
				if err := send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: ch[0], ResourceNamesUnsubscribe: ch[1]}); err != nil {
					return err
				}
			}
		}
		if err := send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resp.TypeURL, ResponseNonce: resp.Nonce}); err != nil {
			return err
		}
	}
}
