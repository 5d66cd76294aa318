package relay

import (
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// A stream's writer side: a writer goroutine runs only while responses are
// queued; it collects what is queued under the stream's mu (stamping the
// stream's nonce on each shared body) and sends it without the lock.

// kickLocked has what was just queued written (mu held): it starts a writer
// unless one is running, which then collects once more before it stops.
func (s *stream[S, Req]) kickLocked() {
	switch {
	case s.stopped || !s.writes:
	case s.writing:
		s.rekick = true
	default:
		s.writing = true
		s.writers.Add(1)
		go s.write()
	}
}

// write is the writer goroutine: it writes until nothing is queued. A
// failed write ends the stream.
func (s *stream[S, Req]) write() {
	defer s.writers.Done()
	for {
		err := s.writeQueued()
		s.mu.Lock()
		if err != nil {
			s.stopped = true
			s.endLocked(err)
		}
		if s.stopped || !s.rekick {
			s.writing = false
			s.mu.Unlock()
			return
		}
		s.rekick = false
		s.mu.Unlock()
	}
}

// outgoing is a stamped message and the tracked response it delivers (nil
// if none), which is settled once written.
type outgoing struct {
	m       wire.Stamped
	settles *shard.Response
}

// writeQueued writes what is queued, in order, until nothing is left
// (writer goroutine): it collects under mu and sends without it. The batch
// is reused: gRPC's SendMsg has encoded a message (the buffers, not copies)
// when it returns.
func (s *stream[S, Req]) writeQueued() error {
	for {
		s.batch = s.collect(s.batch[:0])
		if len(s.batch) == 0 {
			return nil
		}
		for i := range s.batch {
			o := &s.batch[i]
			if err := s.transport.SendMsg(&o.m); err != nil {
				return err
			}
			if o.settles != nil {
				o.settles.FanoutStep()
			}
			*o = outgoing{} // nothing of a written message stays reachable
		}
	}
}

// collect stamps a nonce on each queued response the protocol writes and
// counts the others. No protobuf work: the body is shared, the suffix is
// the stream's.
func (s *stream[S, Req]) collect(out []outgoing) []outgoing {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue.drain(func(e queued[S]) {
		if e.sub.common().shard != e.shard || e.sub == s.switching {
			s.droppedLocked(e, drop.Unsubscribed) // queued for a subscription the client has since changed
			return
		}
		m, why := s.proto.collectLocked(e)
		if why != 0 {
			s.droppedLocked(e, why)
			return
		}
		var settles *shard.Response
		if e.tracked {
			settles = e.resp // the stream owes it a fan-out step once written
		}
		out = append(out, outgoing{m: m, settles: settles})
	})
	if len(out) > 0 {
		s.proto.collectedLocked()
	}
	return out
}

// droppedLocked settles and counts a queued entry that is not written.
func (s *stream[S, Req]) droppedLocked(e queued[S], why drop.Reason) {
	e.dropped()
	s.srv.drops.Add(why)
}

// stampLocked assigns the next nonce and stamps it on body for the wire,
// counting it as a push of t (mu held). It allocates nothing.
func (s *stream[S, Req]) stampLocked(body wire.Body, t *typeSubBase) wire.Stamped {
	s.nonce++
	s.acksOwed.Add(1)
	m := s.stamper.Stamp(body, s.nonce)
	s.bytes += int64(m.Len())
	t.nonce = s.nonce
	s.srv.metrics.Pushed(s.variant, t.typeURL, m.Len())
	return m
}
