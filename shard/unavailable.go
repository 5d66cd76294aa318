package shard

import (
	"sync"
	"sync/atomic"
	"time"
)

// What a class knows of its upstream's reach, for the clients it has
// nothing for (issue 27, F3). A client that holds no state keeps a silent
// stream open until its own does-not-exist timer (15 s for grpc-go and
// Envoy) declares its resources removed; told UNAVAILABLE instead, a client
// with a second xDS server in its bootstrap (gRFC A71) falls back to it.
// The upstream source marks the class unreachable past its bound
// (SetUpstreamUnavailable); the downstream server ends the streams of the
// class whose every type the class never received a state of. Clients that
// hold state keep their streams and their state.

// upstreamReach is a class's record of what its upstream sent and whether
// it can be reached. Its lock is a leaf: it may be taken with a stream's
// lock held (unlike Class.mu).
type upstreamReach struct {
	mu sync.Mutex
	// received: the types a state was received of (an answer, not only
	// heartbeats), since the class was made. Guarded by mu.
	received map[string]struct{}
	// down is set while the upstream is unreachable as far as the class's
	// source can tell (nil: reachable): read on every client request, so
	// without a lock. Written under mu.
	down atomic.Pointer[unreachable]
}

// unreachable is since when the upstream is unreachable, and the source's
// reason (for the log).
type unreachable struct {
	since time.Time
	why   string
}

// UnavailableHook is told that a class's upstream became unreachable (see
// Registry.OnUpstreamUnavailable). It runs on the source's goroutine, with
// no lock held, and must not call back into the source.
type UnavailableHook func(c *Class)

// OnUpstreamUnavailable adds f to the hooks every class created from then
// on tells when its upstream becomes unreachable (call it before any class
// exists).
func (r *Registry) OnUpstreamUnavailable(f UnavailableHook) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onUnavailable = append(r.onUnavailable, f)
}

// markReceived records a state of typeURL received.
func (c *Class) markReceived(typeURL string) {
	c.reach.mu.Lock()
	defer c.reach.mu.Unlock()
	if _, ok := c.reach.received[typeURL]; ok {
		return
	}
	if c.reach.received == nil {
		c.reach.received = map[string]struct{}{}
	}
	c.reach.received[typeURL] = struct{}{}
}

// Received reports whether the class ever received a state of typeURL from
// its source.
func (c *Class) Received(typeURL string) bool {
	c.reach.mu.Lock()
	defer c.reach.mu.Unlock()
	_, ok := c.reach.received[typeURL]
	return ok
}

// SetUpstreamUnavailable records that the class's upstream is unreachable
// since since (zero: it is reachable again), for why. Becoming unreachable
// tells the registry's hooks, once per outage.
func (c *Class) SetUpstreamUnavailable(since time.Time, why string) {
	c.reach.mu.Lock()
	was := c.reach.down.Load() != nil
	if since.IsZero() {
		c.reach.down.Store(nil)
	} else {
		c.reach.down.Store(&unreachable{since: since, why: why})
	}
	c.reach.mu.Unlock()
	if was || since.IsZero() {
		return
	}
	for _, f := range c.onUnavailable {
		f(c)
	}
}

// UpstreamUnavailable returns since when the class's upstream is
// unreachable and the source's reason; ok is false while it is reachable
// (or the source does not say, as the file source). It takes no lock.
func (c *Class) UpstreamUnavailable() (since time.Time, why string, ok bool) {
	d := c.reach.down.Load()
	if d == nil {
		return time.Time{}, "", false
	}
	return d.since, d.why, true
}
