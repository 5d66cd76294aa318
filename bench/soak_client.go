package bench

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// heldResource is one resource a proxy holds.
type heldResource struct {
	hash    uint64
	version string   // the server's per-resource version (delta), re-sent on reconnect
	deps    []string // RDS / EDS names it makes the proxy subscribe to
}

// ProxyClient is a raw ADS client that behaves like a proxy: wildcard LDS
// and CDS, RDS for the route configurations its listeners name and EDS for
// its clusters' service names (subscriptions follow as resources come and
// go), an ACK for every response, and the exact state it holds. It keeps its
// state across reconnections, as Envoy does, and resumes from it (SotW: the
// last versions; delta: initial_resource_versions).
type ProxyClient struct {
	// Set at construction, read-only.
	ID    int
	Class string
	Delta bool
	addr  string
	src   net.IP
	deps  *depCache

	mu           sync.Mutex
	held         map[string]map[string]heldResource // guarded by mu: type → name → resource
	subs         map[string][]string                // guarded by mu: RDS/EDS names subscribed (sorted)
	cancelStream context.CancelFunc                 // guarded by mu: ends the current stream
	churned      bool                               // guarded by mu: the current stream was ended by Reconnect
	lastErr      error                              // guarded by mu: why the last stream ended unexpectedly

	sotwVersions map[string]string // owned by the run goroutine: last version per type

	digest    atomic.Uint64 // State().Digest(), kept per change
	changedAt atomic.Int64  // unix nanoseconds of the last digest change
	responses atomic.Int64  // responses received
	streams   atomic.Int64  // streams opened
	drops     atomic.Int64  // streams that ended without Reconnect or shutdown
}

func newProxyClient(id int, class string, delta bool, addr string, src net.IP, deps *depCache) *ProxyClient {
	c := &ProxyClient{ID: id, Class: class, Delta: delta, addr: addr, src: src, deps: deps,
		held: map[string]map[string]heldResource{}, subs: map[string][]string{}}
	for _, t := range xdsTypes {
		c.held[t] = map[string]heldResource{}
	}
	return c
}

// run connects and serves streams until ctx ends, reconnecting after each
// stream (a churn reconnection at once; an unexpected end after a short
// pause, counted as a drop).
func (c *ProxyClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := c.session(ctx)
		c.mu.Lock()
		churned := c.churned
		c.churned = false
		if !churned && ctx.Err() == nil {
			c.lastErr = err
		}
		c.mu.Unlock()
		if churned || ctx.Err() != nil {
			continue
		}
		c.drops.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Reconnect ends the current stream and its connection; run opens new ones.
func (c *ProxyClient) Reconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelStream != nil {
		c.churned = true
		c.cancelStream()
	}
}

// session dials a new connection and runs one stream on it.
func (c *ProxyClient) session(ctx context.Context) error {
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(contextDialer(c.src)))
	if err != nil {
		return err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.mu.Lock()
	c.cancelStream = cancel
	c.mu.Unlock()
	ads := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn)
	raw := grpc.ForceCodecV2(wire.NewCodec())
	node := &corev3.Node{Id: fmt.Sprintf("soak-client-%d", c.ID), Cluster: c.Class}
	c.streams.Add(1)
	if c.Delta {
		s, err := ads.DeltaAggregatedResources(sctx, raw)
		if err != nil {
			return err
		}
		return c.serve(s, &deltaProxy{c: c, s: s, node: node})
	}
	s, err := ads.StreamAggregatedResources(sctx, raw)
	if err != nil {
		return err
	}
	return c.serve(s, newSotWProxy(c, s, node))
}

// entry is one resource of a response.
type entry struct {
	name, version string
	value         []byte
}

// apply installs a response's resources (replace: the response is the
// type's full state) and removals, then recomputes the RDS/EDS
// subscriptions. It returns, per dependent type whose subscription changed,
// the names added and removed. Resources of a dependent type that is not
// subscribed are ignored (an answer that crossed an unsubscription).
func (c *ProxyClient) apply(typeURL string, entries []entry, removed []string, replace bool) (changes map[string][2][]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	held := c.held[typeURL]
	d := c.digest.Load()
	put := func(name string, r heldResource) {
		if old, ok := held[name]; ok {
			d ^= entryDigest(typeURL, name, old.hash)
		}
		held[name] = r
		d ^= entryDigest(typeURL, name, r.hash)
	}
	drop := func(held map[string]heldResource, typeURL, name string) {
		if old, ok := held[name]; ok {
			d ^= entryDigest(typeURL, name, old.hash)
			delete(held, name)
		}
	}
	if replace {
		keep := make(map[string]bool, len(entries))
		for _, e := range entries {
			keep[e.name] = true
		}
		for n := range held {
			if !keep[n] {
				drop(held, typeURL, n)
			}
		}
	}
	for _, e := range entries {
		if (typeURL == RouteType || typeURL == EndpointType) && !slices.Contains(c.subs[typeURL], e.name) {
			continue
		}
		h := ContentHash(e.value)
		put(e.name, heldResource{hash: h, version: e.version, deps: c.deps.of(typeURL, h, e.value)})
	}
	for _, n := range removed {
		drop(held, typeURL, n)
	}
	// Follow the chain: listeners → routes, clusters → assignments.
	for parent, child := range map[string]string{ListenerType: RouteType, ClusterType: EndpointType} {
		if parent != typeURL {
			continue
		}
		want := map[string]bool{}
		for _, r := range held {
			for _, n := range r.deps {
				want[n] = true
			}
		}
		names := slices.Sorted(maps.Keys(want))
		old := c.subs[child]
		if slices.Equal(names, old) {
			continue
		}
		var added, gone []string
		for _, n := range names {
			if !slices.Contains(old, n) {
				added = append(added, n)
			}
		}
		for _, n := range old {
			if !want[n] {
				gone = append(gone, n)
				drop(c.held[child], child, n) // a proxy forgets what it unsubscribed
			}
		}
		c.subs[child] = names
		if changes == nil {
			changes = map[string][2][]string{}
		}
		changes[child] = [2][]string{added, gone}
	}
	if d != c.digest.Load() {
		c.digest.Store(d)
		c.changedAt.Store(time.Now().UnixNano())
	}
	return changes
}

// subscribed returns the names subscribed for a dependent type.
func (c *ProxyClient) subscribed(typeURL string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[typeURL]
}

// versions returns the per-resource versions held of typeURL.
func (c *ProxyClient) versions(typeURL string) map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.held[typeURL]))
	for n, r := range c.held[typeURL] {
		out[n] = r.version
	}
	return out
}

// State returns a copy of what the client holds and its RDS/EDS
// subscriptions.
func (c *ProxyClient) State() (State, map[string][]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := State{}
	for t, held := range c.held {
		s[t] = make(map[string]uint64, len(held))
		for n, r := range held {
			s[t][n] = r.hash
		}
	}
	return s, maps.Clone(c.subs)
}

// LastError is why the client's last stream ended unexpectedly (nil: none).
func (c *ProxyClient) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}
