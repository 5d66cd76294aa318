package relay

import (
	"github.com/xds-relay/xds-relay/shard"
)

// This file is the one place the unit tests that drive a downstream stream
// without gRPC (the fuzzers) reach into its internals: how a stream is
// built, read, written and released, and what it holds per type. A change
// of the stream core's internals is followed here, not in every test.

// underTest drives one downstream stream (either protocol) step by step on
// the test's goroutine.
type underTest struct {
	// read hands the transport's requests to the stream's reader until the
	// transport or the stream fails.
	read func() error
	// write runs the writer until nothing is left to send.
	write func() error
	// release ends the stream as its reader does: every subscription goes.
	release func()
	// queued is the number of responses queued and not yet written.
	queued func() int
	// types is the stream's per-type state, read under its lock.
	types func() map[string]typeView
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
	st := &sotwStream{streamBase: newStreamBase(srv, tr.Context(), fixedType, streamVariant(false, fixedType)),
		transport: tr, types: map[string]*typeSub{}}
	return underTest{
		read:    func() error { return readLoop(tr.Recv, st.handle) },
		write:   st.writeQueued,
		release: func() { releaseAll(&st.streamBase, st.types, st, st) },
		queued: func() int {
			st.mu.Lock()
			defer st.mu.Unlock()
			return len(st.queue.entries)
		},
		types: func() map[string]typeView {
			st.mu.Lock()
			defer st.mu.Unlock()
			out := map[string]typeView{}
			for typeURL, ts := range st.types {
				v := typeView{shard: ts.shard, explicitSeen: ts.explicitSeen}
				if ts.shard != nil {
					v.sub = ts.shard.Sub
				}
				out[typeURL] = v
			}
			return out
		},
	}
}

// deltaUnderTest builds a delta stream of srv on tr, ADS if fixedType is "".
func deltaUnderTest(srv *Server, tr deltaTransport, fixedType string) underTest {
	st := &deltaStream{streamBase: newStreamBase(srv, tr.Context(), fixedType, streamVariant(true, fixedType)),
		transport: tr, types: map[string]*deltaSub{}}
	return underTest{
		read:    func() error { return readLoop(tr.Recv, st.handle) },
		write:   st.writeQueued,
		release: func() { releaseAll(&st.streamBase, st.types, st, st) },
		queued: func() int {
			st.mu.Lock()
			defer st.mu.Unlock()
			return len(st.queue.entries)
		},
		types: func() map[string]typeView {
			st.mu.Lock()
			defer st.mu.Unlock()
			out := map[string]typeView{}
			for typeURL, d := range st.types {
				out[typeURL] = typeView{shard: d.shard, sub: d.subscription()}
			}
			return out
		},
	}
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
