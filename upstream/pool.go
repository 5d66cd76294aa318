package upstream

import (
	"context"
	"errors"
	"math"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// DefaultMaxConnections caps the upstream connections by default
// (Config.MaxConnections, upstream.max_connections): at an upstream
// allowing 100 streams a connection, 12,800 classes.
const DefaultMaxConnections = 128

var errPoolClosed = errors.New("upstream: client closed")

// connPool holds the upstream connections and hands each class stream one
// with room: as many streams on each as its peer allows at once (learned
// from the peer's SETTINGS, settings.go), opening another connection when
// all are full, up to max. A connection whose limit is not learned yet
// carries one stream (its first) until it is. A connection with no stream
// left is closed, but for the first. A stream that finds no room waits
// (acquire's waiting hook tells the class stream, which shows it).
type connPool struct {
	dial func(*streamLimit) (*grpc.ClientConn, error) // read-only
	max  int                                          // read-only
	// onFirst, if set, is told every state of the first connection (which
	// stays open), by its watcher: an affinity member's health
	// (members.go). Read-only after creation.
	onFirst func(*grpc.ClientConn, connectivity.State)

	mu      sync.Mutex
	conns   []*pooledConn
	changed chan struct{} // closed and replaced on every change of room
	closed  bool

	// watchers counts the connections' state watchers (watchReady): Add
	// under mu while !closed; close waits.
	watchers sync.WaitGroup
}

// pooledConn is one upstream connection and the class streams on it.
type pooledConn struct {
	cc      *grpc.ClientConn
	limit   *streamLimit
	streams int         // guarded by connPool.mu
	ready   readySignal // whether the connection is READY, kept by its watcher
}

func newConnPool(max int, dial func(*streamLimit) (*grpc.ClientConn, error)) *connPool {
	return &connPool{dial: dial, max: max, changed: make(chan struct{})}
}

// readySignal tells whether a connection is READY, and wakes who waits for
// it to become so: a class stream that failed to open a stream on it while
// it was not ready waits for it in its backoff (stream.go), as a stream
// waiting for a ready connection would.
type readySignal struct {
	mu    sync.Mutex
	ch    chan struct{} // closed while ready; nil until the first state
	ready bool
}

// get returns the channel closed once the connection is READY (closed now
// if it is) and whether it is.
func (r *readySignal) get() (<-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch, r.ready
}

func (r *readySignal) set(ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	switch {
	case ready && !r.ready:
		close(r.ch)
	case !ready && r.ready:
		r.ch = make(chan struct{})
	}
	r.ready = ready
}

// watchReady keeps pc.ready up to date until the connection is closed,
// and tells onFirst the first connection's states (mu held: it counts the
// watcher).
func (p *connPool) watchReadyLocked(pc *pooledConn) {
	p.watchers.Add(1)
	tell := p.onFirst
	if len(p.conns) != 1 || p.conns[0] != pc {
		tell = nil
	}
	go func() {
		defer p.watchers.Done()
		for state := pc.cc.GetState(); ; state = pc.cc.GetState() {
			pc.ready.set(state == connectivity.Ready)
			if tell != nil {
				tell(pc.cc, state)
			}
			if state == connectivity.Shutdown || !pc.cc.WaitForStateChange(context.Background(), state) {
				return
			}
		}
	}()
}

// room is how many streams pc may carry.
func (pc *pooledConn) room() int {
	max, known := pc.limit.get()
	if !known {
		return 1
	}
	return int(min(max, math.MaxInt32))
}

// broadcastLocked wakes every waiting acquire.
func (p *connPool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *connPool) broadcast() {
	p.mu.Lock()
	p.broadcastLocked()
	p.mu.Unlock()
}

// acquire returns a connection with room for one more stream, taken until
// release. waiting is called (by the caller's goroutine) each time it finds
// every connection full, max of them open, and waits.
func (p *connPool) acquire(ctx context.Context, waiting func()) (*pooledConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		probing := false
		for _, pc := range p.conns {
			if _, known := pc.limit.get(); !known && pc.streams > 0 {
				probing = true
			}
			if pc.streams < pc.room() {
				pc.streams++
				p.mu.Unlock()
				return pc, nil
			}
		}
		if !probing && len(p.conns) < p.max {
			limit := &streamLimit{onLearn: p.broadcast}
			cc, err := p.dial(limit)
			if err != nil {
				p.mu.Unlock()
				return nil, err
			}
			pc := &pooledConn{cc: cc, limit: limit, streams: 1}
			p.conns = append(p.conns, pc)
			p.watchReadyLocked(pc)
			p.mu.Unlock()
			return pc, nil
		}
		ch := p.changed
		p.mu.Unlock()
		if !probing {
			// Not while a new connection's limit is being learned (the
			// upstream may just be down): only when all are full.
			waiting()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// release gives back pc's stream; a connection left with none is closed,
// but for the first.
func (p *connPool) release(pc *pooledConn) {
	p.mu.Lock()
	pc.streams--
	var idle *grpc.ClientConn
	if pc.streams == 0 && !p.closed && len(p.conns) > 0 && p.conns[0] != pc {
		for i, o := range p.conns {
			if o == pc {
				p.conns = append(p.conns[:i], p.conns[i+1:]...)
				idle = pc.cc
				break
			}
		}
	}
	p.broadcastLocked()
	p.mu.Unlock()
	if idle != nil {
		_ = idle.Close()
	}
}

// open makes the first connection, which stays open, now: a bad target
// fails it.
func (p *connPool) open() error {
	if _, err := p.acquire(context.Background(), func() {}); err != nil {
		return err
	}
	p.mu.Lock()
	p.conns[0].streams--
	p.mu.Unlock()
	return nil
}

// firstReady is the first connection's readiness (readySignal.get).
func (p *connPool) firstReady() (<-chan struct{}, bool) {
	p.mu.Lock()
	if len(p.conns) == 0 {
		p.mu.Unlock()
		return nil, false
	}
	pc := p.conns[0]
	p.mu.Unlock()
	return pc.ready.get()
}

// busy reports whether a stream holds a connection.
func (p *connPool) busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		if pc.streams > 0 {
			return true
		}
	}
	return false
}

// connections is how many connections are open.
func (p *connPool) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// close closes every connection; acquire fails from then on.
func (p *connPool) close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.broadcastLocked()
	p.mu.Unlock()
	var errs []error
	for _, pc := range conns {
		errs = append(errs, pc.cc.Close())
	}
	p.watchers.Wait() // each sees its connection shut down
	return errors.Join(errs...)
}
