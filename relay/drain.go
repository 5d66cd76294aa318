package relay

import (
	"net/http"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A drain hands the relay's clients to the other relays of its tier
// (Server.Drain, spread over drain.period). Once it began, nothing new is
// taken on: a stream opened meanwhile is refused, and so is a REST poll,
// and the polls held when it began are answered at once. Without that a
// client that sees the end of its stream before the GOAWAY of the same
// connection (grpc-go's xDS client reopens a stream that had responses
// within a millisecond) would open a stream the drain never ends: cut only
// when the server stops, late, after the drain said it was complete.

// ErrDrainRefused refuses a stream opened on a draining relay: UNAVAILABLE,
// so the client tries another relay (after its backoff, grpc-go's xDS
// client: the stream got no response).
var ErrDrainRefused = status.Error(codes.Unavailable, "xds-relay is draining and takes no new stream: connect to another relay")

// drainRetryAfter is the Retry-After of a REST poll refused while draining:
// by then a poll through the tier's Service reaches another relay.
const drainRetryAfter = "1"

// drainState is what a drain refused, and the signal that it began.
type drainState struct {
	once    sync.Once
	started chan struct{} // closed when the drain begins (read-only after NewServer)
	// Counted from the drain's start; accessed atomically.
	refusedStreams atomic.Int64
	refusedPolls   atomic.Int64
}

// DrainReport says what a drain did with the streams it covers, so the log
// can say whether it is complete.
type DrainReport struct {
	// Streams were open when the drain began.
	Streams int `json:"streams"`
	// Spread were ended at their turn of the spread.
	Spread int `json:"spread"`
	// Left ended by themselves (their clients left) before their turn.
	Left int `json:"left"`
	// Cut were ended at once, before their turn: the drain was cut short
	// (a second signal).
	Cut int `json:"cut"`
	// Refused are the streams opened during the drain, refused with
	// ErrDrainRefused; PollsRefused the REST polls answered 503.
	Refused      int `json:"refused"`
	PollsRefused int `json:"polls_refused"`
	// CutAtEnd were still open when the server stopped after the drain
	// (the caller fills it in: Drain cannot know).
	CutAtEnd int `json:"cut_at_end"`
}

// Complete reports whether every stream the drain covered was ended at its
// turn or left by itself: none was cut, early or at the end.
func (r DrainReport) Complete() bool { return r.Cut == 0 && r.CutAtEnd == 0 }

// StartDrain begins the drain without ending anything yet: from now on a
// new stream is refused (ErrDrainRefused), a REST poll is answered 503 with
// Retry-After, and the polls held now are answered so. Call it before
// grpc.Server.GracefulStop; Drain calls it too. Idempotent.
func (s *Server) StartDrain() {
	s.drain.once.Do(func() {
		s.mu.Lock()
		s.draining = true
		s.mu.Unlock()
		close(s.drain.started)
	})
}

// Draining reports whether a drain began.
func (s *Server) Draining() bool {
	select {
	case <-s.drain.started:
		return true
	default:
		return false
	}
}

// DrainRefusals are the streams and REST polls refused since the drain
// began.
func (s *Server) DrainRefusals() (streams, polls int) {
	return int(s.drain.refusedStreams.Load()), int(s.drain.refusedPolls.Load())
}

// refuseDraining counts and returns the refusal of a stream of variant.
func (s *Server) refuseDraining(variant string) error {
	s.drain.refusedStreams.Add(1)
	s.countRefused(variant, ReasonDrain)
	return ErrDrainRefused
}

// refuseDrainingPoll answers a REST poll of a draining relay: 503, so the
// client polls another relay.
func (s *Server) refuseDrainingPoll(w http.ResponseWriter) {
	s.drain.refusedPolls.Add(1)
	w.Header().Set("Retry-After", drainRetryAfter)
	http.Error(w, "xds-relay is draining: poll another relay", http.StatusServiceUnavailable)
}
