package bench

import (
	"sync"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// broadcaster hands the current state's bytes to every subscribed stream of
// the limit and tcp targets: a stream joining is given the full state, and a
// new state is offered to every stream, superseding a body it has not sent
// yet (as the relay's SotW queues do). It never blocks on a slow stream.
type broadcaster struct {
	mu    sync.Mutex
	state *payloads                // guarded by mu
	subs  map[*subscriber]struct{} // guarded by mu
	total int                      // streams ever subscribed; guarded by mu
}

// subscriber is one stream's slot: at most one body waits to be sent.
type subscriber struct {
	delta bool
	next  chan wire.Body // capacity 1: the latest body not yet sent
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[*subscriber]struct{})}
}

// subscribe registers a stream; the current state, if any, is already
// waiting in its slot.
func (b *broadcaster) subscribe(delta bool) *subscriber {
	s := &subscriber{delta: delta, next: make(chan wire.Body, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[s] = struct{}{}
	b.total++
	if b.state != nil {
		if delta {
			s.offer(b.state.deltaFull)
		} else {
			s.offer(b.state.sotw)
		}
	}
	return s
}

func (b *broadcaster) unsubscribe(s *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, s)
}

// publish makes p the current state and offers it to every stream: SotW
// streams get the full state, delta streams the diff (or, if an older
// body is still unsent, every resource, so nothing is lost).
func (b *broadcaster) publish(p *payloads) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state = p
	for s := range b.subs {
		switch {
		case !s.delta:
			s.offer(p.sotw)
		case s.offer(p.deltaDiff):
		default:
			s.offer(p.deltaFull)
		}
	}
}

// subscribed is the number of streams ever subscribed.
func (b *broadcaster) subscribed() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// offer puts body in the slot, replacing an unsent one, and says whether the
// slot was empty. Called with the broadcaster's mu held, so offers to one
// slot never race (the stream only takes from it).
func (s *subscriber) offer(body wire.Body) (wasEmpty bool) {
	wasEmpty = true
	select {
	case <-s.next:
		wasEmpty = false
	default:
	}
	s.next <- body
	return wasEmpty
}
