package relay

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// What bounds the REST listener's connections and goroutines besides the
// http.Server's own timeouts (ReadHeaderTimeout, IdleTimeout, set where
// the server is built): a request's body must arrive within
// Options.RESTReadTimeout (rest.read_timeout), and at most
// Options.MaxHeldPolls (rest.max_held_polls) polls are held at once.

// Defaults of the REST limits in Options.
const (
	DefaultRESTReadTimeout = 10 * time.Second
	DefaultMaxHeldPolls    = 1000
)

// heldPolls counts the REST polls being held, within max (negative: no
// cap). Safe for concurrent use.
type heldPolls struct {
	max int64 // set at construction, read-only
	n   atomic.Int64
}

// take counts one more held poll; false (and nothing counted) when max
// are held already.
func (h *heldPolls) take() bool {
	if n := h.n.Add(1); h.max >= 0 && n > h.max {
		h.n.Add(-1)
		return false
	}
	return true
}

// done ends a held poll that take counted.
func (h *heldPolls) done() { h.n.Add(-1) }

// HeldPolls is how many REST polls are held now, waiting for a change.
func (s *Server) HeldPolls() int { return int(s.held.n.Load()) }

// heldPollsFull is the error of a poll that would be held past
// rest.max_held_polls; it is answered 429.
type heldPollsFull struct{ max int64 }

func (e heldPollsFull) Error() string {
	return fmt.Sprintf("rest.max_held_polls: %d polls are held already; poll again later or at another relay (a poll whose version_info is not current is still answered at once)", e.max)
}

// bodyDeadline gives the request's body until timeout from now to arrive
// (a client sending a byte every few seconds does not hold a connection
// and a goroutine for long); the returned func lifts the deadline once the
// body is read, so a held poll can wait for its change. A server that
// cannot set deadlines (a test's) leaves the body unbounded by time.
func bodyDeadline(w http.ResponseWriter, timeout time.Duration) (lift func()) {
	rc := http.NewResponseController(w)
	if timeout <= 0 || rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
		return func() {}
	}
	return func() { _ = rc.SetReadDeadline(time.Time{}) }
}

// isTimeout reports whether a body read failed on its deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
