package xdstest

import (
	"context"
	"maps"
	"slices"

	"google.golang.org/protobuf/types/known/anypb"
)

// What a client holds, read under its lock: the accessors the engine and
// tests judge a client by.

// Held returns what the client holds of typeURL: name -> resource.
func (c *Client) Held(typeURL string) map[string]*anypb.Any {
	return copyOf(c, typeURL, func(ts *typeState) map[string]*anypb.Any { return ts.held })
}

// Versions returns the delta resource versions the client holds of typeURL.
func (c *Client) Versions(typeURL string) map[string]string {
	return copyOf(c, typeURL, func(ts *typeState) map[string]string { return ts.versions })
}

// TypeState is a client's state of one type URL, read at one instant.
type TypeState struct {
	Sub  Sub                   // how the server must read the subscription
	Held map[string]*anypb.Any // name -> resource held
	// Rejected: for names the client NACKed and has not accepted a newer
	// word on since, what the NACKed response said (nil: that it is absent).
	Rejected map[string]*anypb.Any
}

// State returns the client's state of typeURL under one lock: a response
// is handled whole between two calls, never within one. (Held and
// Rejected read apart could see what a response accepted before it was
// handled and the rejection it cleared after: a state the client never
// had.)
func (c *Client) State(typeURL string) TypeState {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.types[typeURL]
	if ts == nil {
		return TypeState{Held: map[string]*anypb.Any{}, Rejected: map[string]*anypb.Any{}}
	}
	return TypeState{Sub: ts.sub(), Held: maps.Clone(ts.held), Rejected: maps.Clone(ts.rejected)}
}

// copyOf returns a copy of the map field of typeURL's state, empty if the
// client has no state of typeURL.
func copyOf[V any](c *Client, typeURL string, field func(*typeState) map[string]V) map[string]V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := c.types[typeURL]; ts != nil {
		return maps.Clone(field(ts))
	}
	return map[string]V{}
}

// Subscription returns how the server must read the client's subscription
// of typeURL.
func (c *Client) Subscription(typeURL string) Sub {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := c.types[typeURL]; ts != nil {
		return ts.sub()
	}
	return Sub{}
}

func (ts *typeState) sub() Sub {
	return Sub{Wildcard: ts.wildcard, Legacy: ts.legacy, Names: slices.Sorted(maps.Keys(ts.names))}
}

// Counts returns the responses of typeURL received and NACKed.
func (c *Client) Counts(typeURL string) (received, nacked int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := c.types[typeURL]; ts != nil {
		return ts.received, ts.nacked
	}
	return 0, 0
}

// Log returns the last responses handled (up to 1024), oldest first.
func (c *Client) Log() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// Err returns the error that ended one of the current session's streams
// (nil while they are all open).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess.err
}

// Changed returns a channel closed at the client's next change of state.
func (c *Client) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// WaitFor waits until cond holds (checked now and after every change) or ctx
// ends; it reports whether cond held.
func (c *Client) WaitFor(ctx context.Context, cond func(*Client) bool) bool {
	for {
		ch := c.Changed()
		if cond(c) {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return cond(c)
		}
	}
}
