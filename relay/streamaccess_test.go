package relay

import (
	"sync"

	"github.com/xds-relay/xds-relay/shard"
)

// This file is the one place the unit tests that drive a downstream stream
// without gRPC (the fuzzers) reach into its internals: how a stream is
// built, read, written and released, and what it holds per type. A change
// of the stream core's internals is followed here, not in every test.

// underTest drives one downstream stream (either protocol) step by step on
// the test's goroutine.
type underTest struct {
	mu *sync.Mutex // the stream's lock
	// read hands the transport's requests to the stream's reader until the
	// transport or the stream fails.
	read func() error
	// write runs the writer until nothing is left to send.
	write func() error
	// release ends the stream as its reader does: every subscription goes.
	release func()
	// queuedLocked is the number of responses queued and not yet written.
	queuedLocked func() int
	// typesLocked is the stream's per-type state.
	typesLocked func() map[string]typeView
}

// typeView is what the tests check of a stream's state for one type.
type typeView struct {
	shard *shard.Shard       // the shard subscribed to; nil if none
	sub   shard.Subscription // the subscription the stream read from the requests
	// explicitSeen (SotW) says a non-empty resource_names was received, which
	// ends the legacy wildcard reading of an empty one.
	explicitSeen bool
}

// streamVariant is the variant label of a stream of fixedType ("" for ADS).
func streamVariant(delta bool, fixedType string) string {
	switch {
	case delta && fixedType == "":
		return "delta-ads"
	case delta:
		return "delta-per-type"
	case fixedType == "":
		return "ads"
	}
	return "per-type"
}

// sotwUnderTest builds a SotW stream of srv on tr, ADS if fixedType is "".
func sotwUnderTest(srv *Server, tr sotwTransport, fixedType string) underTest {
	st := newSotWStream(srv, tr, fixedType, streamVariant(false, fixedType))
	return newUnderTest(&st.stream, func(ts *sotwTypeSub) typeView {
		return typeView{shard: ts.shard, sub: subOfShard(ts.shard), explicitSeen: ts.names.Listed()}
	})
}

// deltaUnderTest builds a delta stream of srv on tr, ADS if fixedType is "".
func deltaUnderTest(srv *Server, tr deltaTransport, fixedType string) underTest {
	st := newDeltaStream(srv, tr, fixedType, streamVariant(true, fixedType))
	return newUnderTest(&st.stream, func(d *deltaTypeSub) typeView {
		return typeView{shard: d.shard, sub: d.subscription()}
	})
}

// newUnderTest assembles the accessors of a stream of either protocol from
// its core, each per-type state seen through view.
func newUnderTest[S perType, Req any](st *stream[S, Req], view func(S) typeView) underTest {
	return underTest{mu: &st.mu,
		read:         st.read,
		write:        st.writeQueued,
		release:      st.release,
		queuedLocked: func() int { return len(st.queue.entries) },
		typesLocked: func() map[string]typeView {
			out := map[string]typeView{}
			for typeURL, s := range st.types.all() {
				out[typeURL] = view(s)
			}
			return out
		}}
}

// queued is the number of responses queued and not yet written.
func (u underTest) queued() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.queuedLocked()
}

// types is the stream's per-type state, read under its lock.
func (u underTest) types() map[string]typeView {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.typesLocked()
}

// shards returns the shard of each type the stream subscribes to.
func (u underTest) shards() map[string]*shard.Shard {
	out := map[string]*shard.Shard{}
	for typeURL, v := range u.types() {
		if v.shard != nil {
			out[typeURL] = v.shard
		}
	}
	return out
}

// subOfShard is the subscription of sh; empty if sh is nil.
func subOfShard(sh *shard.Shard) shard.Subscription {
	if sh == nil {
		return shard.Subscription{}
	}
	return sh.Sub
}
