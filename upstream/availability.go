package upstream

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// DefaultUnavailableAfter is how long a class's upstream may stay
// unreachable before the class is marked unavailable, by default (the
// app's upstream.unavailable_after): well under the 15 s after which
// grpc-go and Envoy declare a resource they were never sent removed, so a
// client told UNAVAILABLE before then can use its fallback server.
const DefaultUnavailableAfter = 5 * time.Second

// DefaultConnectTimeout bounds an upstream connection attempt, by default
// (Config.ConnectTimeout, upstream.connect_timeout): dialing, the TLS
// handshake and the server's HTTP/2 preface. gRPC's own is 20 s.
const DefaultConnectTimeout = 5 * time.Second

// availability decides when a class's upstream counts as unreachable and
// tells the class (shard.Class.SetUpstreamUnavailable), whose downstream
// server then ends the streams it has nothing for (issue 27, F3).
//
// The class is unavailable once it has had no upstream answer for after
// (since its stream started, or since its last session with an answer
// ended) while its stream is not connected: connecting, backing off after
// failures. A stream that is open (the upstream may just be silent) or
// that waits for a stream slot on a healthy connection (waiting_for_stream)
// is not unavailable. It is available again as soon as its stream is
// connected.
//
// Called by the class stream's run goroutine and its timer; mu guards it.
type availability struct {
	s     *classStream  // read-only
	after time.Duration // read-only; 0: never unavailable

	mu          sync.Mutex
	since       time.Time // when the upstream was last answering (zero: it is)
	connectedAt time.Time // when the session's stream opened (zero: none open)
	marked      bool      // the class is marked unavailable
	timer       *time.Timer
	stopped     bool
}

// connected: the session's stream is open and subscribed.
func (a *availability) connected() {
	a.mu.Lock()
	a.connectedAt = time.Now()
	a.mu.Unlock()
	a.check()
}

// down: a session ended (or none began yet); the upstream is not
// answering from now on, if it was. A stream that stayed open for the
// bound counts as an answer: an upstream in sync with the class (another
// relay) rightly sends nothing on a new stream.
func (a *availability) down() {
	a.mu.Lock()
	now := time.Now()
	if !a.connectedAt.IsZero() && now.Sub(a.connectedAt) >= a.after {
		a.since = now
	} else if a.since.IsZero() {
		a.since = now
	}
	a.connectedAt = time.Time{}
	a.mu.Unlock()
	a.check()
}

// slotFound: the class waited for a stream slot on full, healthy
// connections and got one; the time it waited does not count.
func (a *availability) slotFound() {
	a.mu.Lock()
	a.since = time.Now()
	a.mu.Unlock()
}

// answered: the upstream answered on the stream.
func (a *availability) answered() {
	a.mu.Lock()
	a.since = time.Time{}
	a.mu.Unlock()
	a.check()
}

// stop ends the tracking when the class stream stops.
func (a *availability) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.marked {
		a.marked = false
		a.s.class.SetUpstreamUnavailable(time.Time{}, "")
	}
}

// check marks or clears the class by the rule above, and arms the timer
// for the moment the bound passes.
func (a *availability) check() {
	if a.after <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	st := a.s.snapshotState()
	idle := st.State == StateConnected || st.State == StateWaiting
	switch {
	case a.since.IsZero() || idle:
		if a.marked {
			a.marked = false
			a.s.class.SetUpstreamUnavailable(time.Time{}, "")
			a.s.setStatus(func(st *ClassStreamStatus) { st.UnavailableSince = nil })
			a.s.log.Info("upstream reachable again: new clients of the class are served")
		}
	case a.marked:
	case time.Since(a.since) >= a.after:
		a.marked = true
		why := st.LastError
		if why == "" {
			why = "no upstream stream yet (" + st.State + ")"
		}
		since := a.since
		a.s.class.SetUpstreamUnavailable(since, why)
		a.s.setStatus(func(st *ClassStreamStatus) { st.UnavailableSince = &since })
		a.s.warn("upstream unreachable: clients the class has nothing for are told UNAVAILABLE, so that they use another xDS server",
			zap.Duration("for", time.Since(since).Round(time.Millisecond)), zap.String("key", "upstream.unavailable_after"), a.s.field("error", why))
	default:
		left := a.after - time.Since(a.since)
		if a.timer == nil {
			a.timer = time.AfterFunc(left, a.check)
		} else {
			a.timer.Reset(left)
		}
	}
}
