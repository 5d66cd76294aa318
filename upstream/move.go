package upstream

import (
	"math/rand/v2"
	"time"
)

// moveRestart ends a healthy session because the member set now sends
// the class to another member (upstream.affinity: class): the class
// stream opens its next stream there at once, a chosen restart
// (RestartMove). The old stream closes only once the new member's
// connection is READY, so the class is without a stream for one stream's
// opening; clients keep what they hold meanwhile, and the new stream's
// answers, of the same content, change nothing they are sent.
type moveRestart struct{ from, to string }

func (e *moveRestart) Error() string {
	return "the class moves from upstream member " + e.from + " to " + e.to
}

// mover watches, for one session on member on, whether the member set
// sends the class elsewhere. A move waits a random time up to spread
// (upstream.backoff.max), so the classes a new member takes do not all
// reopen in one instant, then for the new member's connection to be
// READY. Owned by the session's run goroutine; its channels are nil when
// nothing is due (a nil channel never fires in the session's select).
type mover struct {
	s      *classStream
	on     *member
	spread time.Duration

	watch <-chan struct{}  // the set's next change (nil without affinity)
	timer *time.Timer      // the spread wait, armed while a move is due
	due   <-chan time.Time // timer's channel while armed
	ready <-chan struct{}  // the target's first connection becomes READY
}

func newMover(s *classStream, on *member, spread time.Duration) *mover {
	return &mover{s: s, on: on, spread: spread, watch: s.members.watch()}
}

// changed: the member set changed. A move is armed when the class is now
// picked for another live member, and disarmed when it is picked for its
// own again (or no member is live: the stream it has is kept).
func (mv *mover) changed() {
	mv.watch = mv.s.members.watch()
	to := mv.s.members.pick(mv.s.class.Name)
	if to == nil || to == mv.on {
		mv.stop()
		return
	}
	if mv.timer == nil {
		mv.timer = time.NewTimer(rand.N(mv.spread + 1))
		mv.due = mv.timer.C
	}
}

// fire: the spread wait is over. It returns the move when the target's
// connection is READY; otherwise it waits for that (ready).
func (mv *mover) fire() *moveRestart {
	mv.timer, mv.due = nil, nil
	to := mv.s.members.pick(mv.s.class.Name)
	if to == nil || to == mv.on {
		return nil
	}
	ch, ok := to.pool.firstReady()
	if ok {
		return &moveRestart{from: mv.on.addr, to: to.addr}
	}
	mv.ready = ch
	return nil
}

// readied: the awaited connection became READY.
func (mv *mover) readied() *moveRestart {
	mv.ready = nil
	return mv.fire()
}

func (mv *mover) stop() {
	if mv.timer != nil {
		mv.timer.Stop()
	}
	mv.timer, mv.due, mv.ready = nil, nil, nil
}
