package bench

import (
	"sync"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// broadcaster hands the current state's bytes to every subscribed stream of
// the limit and tcp targets: a stream joining is given the full state, and a
// new state is offered to every stream, superseding a body it has not sent
// yet (as the relay's SotW queues do). It never blocks on a slow stream.
//
// Each class has its own state (classes with identical content share one);
// a stream is of the class its first request names. A class may also have a
// load assignment (the churn runs'), offered to SotW streams in a slot of
// its own.
type broadcaster struct {
	mu    sync.Mutex
	state map[int]*payloads        // guarded by mu: per class; key -1 is every class's
	eds   map[int]wire.Body        // guarded by mu: per class, the load assignment's SotW body
	subs  map[*subscriber]struct{} // guarded by mu
	total int                      // streams ever subscribed; guarded by mu
}

// subscriber is one stream's slots: at most one body of each type waits to
// be sent.
type subscriber struct {
	delta bool
	class int
	next  chan wire.Body // capacity 1: the latest CDS body not yet sent
	eds   chan wire.Body // capacity 1: the latest EDS body not yet sent
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[*subscriber]struct{}), state: make(map[int]*payloads), eds: make(map[int]wire.Body)}
}

// stateOf is class's current state. Called with mu held.
func (b *broadcaster) stateOf(class int) *payloads {
	if p := b.state[class]; p != nil {
		return p
	}
	return b.state[-1]
}

// subscribe registers a stream of class; the current state, if any, is
// already waiting in its slot.
func (b *broadcaster) subscribe(delta bool, class int) *subscriber {
	s := &subscriber{delta: delta, class: class, next: make(chan wire.Body, 1), eds: make(chan wire.Body, 1)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[s] = struct{}{}
	b.total++
	if st := b.stateOf(class); st != nil {
		if delta {
			s.offer(st.deltaFull)
		} else {
			s.offer(st.sotw)
		}
	}
	if body, ok := b.eds[class]; ok && !delta {
		offer(s.eds, body)
	}
	return s
}

func (b *broadcaster) unsubscribe(s *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, s)
}

// publish makes p the current state of class (-1: of every class) and
// offers it to the class's streams: SotW streams get the full state, delta
// streams the diff (or, if an older body is still unsent, every resource, so
// nothing is lost).
func (b *broadcaster) publish(class int, p *payloads) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if class < 0 {
		clear(b.state)
	}
	b.state[class] = p
	for s := range b.subs {
		if class >= 0 && s.class != class {
			continue
		}
		switch {
		case !s.delta:
			s.offer(p.sotw)
		case s.offer(p.deltaDiff):
		default:
			s.offer(p.deltaFull)
		}
	}
}

// publishEDS makes body class's load assignment and offers it to the
// class's SotW streams.
func (b *broadcaster) publishEDS(class int, body wire.Body) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eds[class] = body
	for s := range b.subs {
		if s.class == class && !s.delta {
			offer(s.eds, body)
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
func (s *subscriber) offer(body wire.Body) (wasEmpty bool) { return offer(s.next, body) }

func offer(slot chan wire.Body, body wire.Body) (wasEmpty bool) {
	wasEmpty = true
	select {
	case <-slot:
		wasEmpty = false
	default:
	}
	slot <- body
	return wasEmpty
}
