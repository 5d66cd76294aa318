package bench

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// dependentTypes are the types a proxy subscribes to by name.
var dependentTypes = []string{RouteType, EndpointType}

func isDependent(typeURL string) bool { return typeURL == RouteType || typeURL == EndpointType }

// proxyResponse is a response as a proxy uses it, in either protocol.
type proxyResponse struct {
	typeURL, version, nonce string
	entries                 []entry
	removed                 []string // delta: resources the server removed
	replace                 bool     // the response is the type's full state
}

// proxyProtocol is what differs between a SotW and a delta proxy stream;
// serve runs the rest. Owned by the run goroutine.
type proxyProtocol interface {
	// start sends the stream's first requests.
	start() error
	// parse reads a response.
	parse(b []byte) (proxyResponse, error)
	// answer sends what a response calls for: the dependent types'
	// subscription changes (apply's), then the ACK.
	answer(r proxyResponse, changes map[string][2][]string) error
}

// serve runs one ADS stream (run goroutine): the first requests, then for
// each response its resources applied and its answer sent.
func (c *ProxyClient) serve(s grpc.ClientStream, p proxyProtocol) error {
	if err := p.start(); err != nil {
		return err
	}
	for {
		var m wire.Raw
		if err := s.RecvMsg(&m); err != nil {
			return err
		}
		r, err := p.parse(m.Bytes)
		if err != nil {
			return err
		}
		c.responses.Add(1)
		if err := p.answer(r, c.apply(r.typeURL, r.entries, r.removed, r.replace)); err != nil {
			return err
		}
	}
}

// sotwProxy is a state-of-the-world ADS stream. Per type on this stream it
// keeps the last nonce and whether a request was sent; the last versions
// are the client's, kept across streams, as a proxy re-sends them.
type sotwProxy struct {
	c      *ProxyClient
	s      discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node   *corev3.Node
	nonces map[string]string
	sent   map[string]bool
}

func newSotWProxy(c *ProxyClient, s discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient, node *corev3.Node) *sotwProxy {
	if c.sotwVersions == nil {
		c.sotwVersions = map[string]string{}
	}
	return &sotwProxy{c: c, s: s, node: node, nonces: map[string]string{}, sent: map[string]bool{}}
}

// request sends typeURL's request: its subscription, last version and nonce.
func (p *sotwProxy) request(typeURL string) error {
	req := &discoverygrpc.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: p.c.sotwVersions[typeURL], ResponseNonce: p.nonces[typeURL]}
	if isDependent(typeURL) {
		req.ResourceNames = p.c.subscribed(typeURL)
		if len(req.ResourceNames) == 0 && !p.sent[typeURL] {
			return nil // an empty first request would be the legacy wildcard
		}
	}
	if len(p.sent) == 0 {
		req.Node = p.node
	}
	p.sent[typeURL] = true
	return p.s.Send(req)
}

func (p *sotwProxy) start() error {
	for _, t := range xdsTypes {
		if err := p.request(t); err != nil {
			return err
		}
	}
	return nil
}

func (p *sotwProxy) parse(b []byte) (proxyResponse, error) {
	resp, err := wire.ParseResponse(b)
	if err != nil {
		return proxyResponse{}, err
	}
	r := proxyResponse{typeURL: resp.TypeURL, version: resp.VersionInfo, nonce: resp.Nonce,
		entries: make([]entry, 0, len(resp.Resources)), replace: !isDependent(resp.TypeURL)}
	for _, a := range resp.Resources {
		_, value, err := wire.ParseAny(a)
		if err != nil {
			return proxyResponse{}, err
		}
		name, err := wire.ResourceName(value)
		if err != nil {
			return proxyResponse{}, fmt.Errorf("%s: %w", resp.TypeURL, err)
		}
		r.entries = append(r.entries, entry{name: name, value: value})
	}
	return r, nil
}

func (p *sotwProxy) answer(r proxyResponse, changes map[string][2][]string) error {
	for _, t := range dependentTypes {
		if _, ok := changes[t]; ok {
			if err := p.request(t); err != nil {
				return err
			}
		}
	}
	p.c.sotwVersions[r.typeURL], p.nonces[r.typeURL] = r.version, r.nonce
	return p.request(r.typeURL) // the ACK
}

// deltaProxy is an incremental ADS stream.
type deltaProxy struct {
	c    *ProxyClient
	s    discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node *corev3.Node // sent with the first request, then nil
}

func (p *deltaProxy) send(req *discoverygrpc.DeltaDiscoveryRequest) error {
	if p.node != nil {
		req.Node, p.node = p.node, nil
	}
	return p.s.Send(req)
}

// start subscribes to every type, claiming the versions held.
func (p *deltaProxy) start() error {
	for _, t := range xdsTypes {
		req := &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t, InitialResourceVersions: p.c.versions(t)}
		if isDependent(t) {
			if req.ResourceNamesSubscribe = p.c.subscribed(t); len(req.ResourceNamesSubscribe) == 0 {
				continue
			}
		} else {
			req.ResourceNamesSubscribe = []string{"*"}
		}
		if err := p.send(req); err != nil {
			return err
		}
	}
	return nil
}

func (p *deltaProxy) answer(r proxyResponse, changes map[string][2][]string) error {
	for _, t := range dependentTypes {
		if ch, ok := changes[t]; ok {
			if err := p.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t, ResourceNamesSubscribe: ch[0], ResourceNamesUnsubscribe: ch[1]}); err != nil {
				return err
			}
		}
	}
	return p.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: r.typeURL, ResponseNonce: r.nonce})
}

func (p *deltaProxy) parse(b []byte) (proxyResponse, error) {
	resp, err := wire.ParseDeltaResponse(b)
	if err != nil {
		return proxyResponse{}, err
	}
	r := proxyResponse{typeURL: resp.TypeURL, nonce: resp.Nonce, removed: resp.Removed,
		entries: make([]entry, 0, len(resp.Resources))}
	for _, raw := range resp.Resources {
		res, err := wire.ParseDeltaResource(raw)
		if err != nil {
			return proxyResponse{}, err
		}
		if res.Any == nil {
			continue // a TTL heartbeat
		}
		_, value, err := wire.ParseAny(res.Any)
		if err != nil {
			return proxyResponse{}, err
		}
		r.entries = append(r.entries, entry{name: res.Name, version: res.Version, value: value})
	}
	return r, nil
}

var (
	_ proxyProtocol = (*sotwProxy)(nil)
	_ proxyProtocol = (*deltaProxy)(nil)
)
