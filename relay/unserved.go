package relay

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
)

// A client the relay cannot serve is told so (issue 27, F3). While a
// class's upstream is unreachable past upstream.unavailable_after (the
// source marks the class, shard.Class.SetUpstreamUnavailable), a stream of
// the class that was sent nothing and subscribes only to types the class
// never received a state of is ended with UNAVAILABLE: a client with a
// second xDS server in its bootstrap (gRFC A71: a stream that fails before
// its first response) falls back to it, instead of waiting on a silent
// stream until its does-not-exist timer declares its resources removed.
// Streams that were sent something, and those of a type the class holds,
// keep their streams and state: the relay serves them what it has, and
// they keep their last good configuration through the outage.

// unservedError is the status of such a stream: UNAVAILABLE, naming the
// class, the types and the reason (no upstream detail: the clients need not
// learn the control plane's address or its errors).
type unservedError struct {
	class string
	since time.Time
	types []string
}

func (e *unservedError) Error() string { return e.GRPCStatus().Message() }

func (e *unservedError) GRPCStatus() *status.Status {
	return status.Newf(codes.Unavailable,
		"xds-relay holds nothing of %v for node class %q and cannot reach its control plane (for %v): use another xDS server",
		e.types, e.class, time.Since(e.since).Round(time.Second))
}

// classUnavailable ends the unserved streams of c (its upstream just became
// unreachable; the hook runs on the source's goroutine).
func (s *Server) classUnavailable(c *shard.Class) {
	s.mu.Lock()
	streams := make([]downstream, 0, len(s.streams))
	for st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.endUnserved(c)
	}
}

// unserved returns the status ending the stream if the relay cannot serve
// it (see above) and its class c is c (nil: the stream's own class); nil
// otherwise. Any goroutine, mu not held.
func (s *stream[S, Req]) unserved(c *shard.Class) error {
	s.mu.Lock()
	if s.class == nil || (c != nil && s.class != c) || s.nonce != 0 || s.types.len() == 0 {
		s.mu.Unlock()
		return nil
	}
	class := s.class
	types := make([]string, 0, s.types.len())
	for typeURL := range s.types.all() {
		types = append(types, typeURL)
	}
	s.mu.Unlock()
	since, _, down := class.UpstreamUnavailable()
	if !down {
		return nil
	}
	for _, t := range types {
		if class.Received(t) {
			return nil
		}
	}
	return &unservedError{class: class.Name, since: since, types: types} // sorted, as the table
}

// endUnserved ends the stream if the relay cannot serve it and its class is
// c.
func (s *stream[S, Req]) endUnserved(c *shard.Class) {
	if err := s.unserved(c); err != nil {
		s.end(err)
	}
}

// checkServed is called by the reader after each request: a stream of a
// class marked unreachable is ended at once if the relay cannot serve it.
// Cheap while the class is reachable.
func (s *stream[S, Req]) checkServed() error {
	if s.class == nil { // written by this goroutine
		return nil
	}
	if _, _, down := s.class.UpstreamUnavailable(); !down {
		return nil
	}
	return s.unserved(nil)
}
