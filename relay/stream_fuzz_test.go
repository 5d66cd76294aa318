package relay

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/shard"
)

// The driver both stream fuzzers (FuzzSotWRequests, FuzzDeltaRequests)
// share. It drives a real stream (its reader's handle, its writer's collect
// through flush into a fake transport) with a fuzzed program of requests and
// class updates, from one kind of upstream per run (complete states, merges
// or incremental updates with removals, and the upstream's reports of what
// it asked for), on one goroutine, and checks, whatever the protocol:
//
//   - handle rejects exactly the bad requests, with InvalidArgument or
//     ResourceExhausted;
//   - every response decodes, has a fresh nonce, the type URL of a type the
//     stream subscribes to (the service's, per type), distinct resources
//     exactly as the upstream sent them, only subscribed ones;
//   - the stream's subscription is the one the spec's rules give;
//   - the stream holds exactly one shard per subscribed type, and none once
//     released; a released stream is told of nothing.
//
// The protocol's client model (sotwFuzz, deltaFuzz) predicts and checks its
// requests and responses.
//
// Input format: a header byte (bit 0: per-type stream; bit 1: its type; bit
// 2: at most 1 type per stream; bit 3: at most 2 names per request; bits
// 4-5: the upstream kind, see newFuzzUpstream), then steps, by the low 2
// bits of their first byte: 0 request (see the model's request), 1 upstream
// step (see fuzzUpstream.step), 2 and 3 writer step.

const (
	maxFuzzRequests = 16
	maxFuzzSteps    = 64
)

// fuzzModel is one protocol's model of the client of a fuzzed stream.
type fuzzModel interface {
	// request runs one reader step decoded from in; it reports whether the
	// stream lives on.
	request(in *fuzzBytes) bool
	// received checks what the client receives in one writer step, in the
	// order sent.
	received(sent [][]byte)
}

// streamFuzz is what the stream fuzzers share of a run: the stream under
// test, its class and limits, and what the client saw of every type.
type streamFuzz struct {
	t     *testing.T
	res   *fuzzResources
	class *shard.Class
	node  *corev3.Node
	st    underTest
	sent  *fuzzSent // what the stream's writer sent

	ads        bool
	fixed      string // the per-type stream's type (also set, unused, for ADS)
	maxTypes   int
	maxNames   int
	classified bool
	nonces     map[string]bool // every nonce received
}

// service is the stream's fixed type URL: "" for ADS.
func (z *streamFuzz) service() string {
	if z.ads {
		return ""
	}
	return z.fixed
}

// fuzzStream is a stream fuzz target: it adds the seeds and runs each input
// against the stream and model newModel builds.
func fuzzStream(f *testing.F, seeds [][]byte, newModel func(*streamFuzz, *Server) fuzzModel) {
	res := newFuzzResources(f)
	for _, seed := range seeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runStreamFuzz(t, res, data, newModel)
	})
}

// runStreamFuzz runs one fuzz input against the stream newModel builds.
func runStreamFuzz(t *testing.T, res *fuzzResources, data []byte, newModel func(*streamFuzz, *Server) fuzzModel) {
	in := &fuzzBytes{b: data}
	h := in.next()
	srv, class, node := fuzzServer(h&4 != 0, h&8 != 0)
	z := &streamFuzz{t: t, res: res, class: class, node: node, ads: h&1 == 0, fixed: fuzzTypes[(h>>1)&1],
		maxTypes: srv.opts.MaxTypesPerStream, maxNames: srv.opts.MaxResourceNames, nonces: map[string]bool{}, sent: &fuzzSent{}}
	model := newModel(z, srv)

	upstream := newFuzzUpstream(t, h, res, class)
	requests := 0
	alive := true
	for steps := 0; alive && in.more() && steps < maxFuzzSteps; steps++ {
		o := in.next()
		switch o & 3 {
		case 0:
			if requests++; requests > maxFuzzRequests {
				continue
			}
			alive = model.request(in)
		case 1:
			upstream.step(in, o)
		default:
			model.received(z.writeStep())
		}
		checkWatched(t, class, z.st.shards())
	}
	if alive {
		model.received(z.writeStep())
	}

	// The stream ends: the reader releases its subscriptions.
	z.st.release()
	for _, ts := range class.Status() {
		if len(ts.Shards) > 0 {
			t.Fatalf("%s: released stream left shards %+v", short(ts.TypeURL), ts.Shards)
		}
	}
	before := z.st.queued()
	for _, typeURL := range fuzzTypes {
		r := []*shard.Resource{res.get(typeURL, "a", len(data))}
		class.ApplyUpdate(typeURL, shard.Update{Kind: shard.UpdateMerge, Resources: r})
		class.ApplyUpdate(typeURL, shard.Update{Kind: shard.UpdateIncremental, Removed: []string{"b"}})
	}
	if after := z.st.queued(); after != before {
		t.Fatalf("released stream was queued %d responses", after-before)
	}
}

// admit predicts what handle makes of a request's type URL and node, the
// checks both protocols share: it returns the type URL the request is for
// and the code the stream must end with (OK if it lives on).
func (z *streamFuzz) admit(typ string, withNode bool) (typeURL string, code codes.Code, why string) {
	typeURL, code = typ, codes.OK
	switch {
	case z.ads && typ == "":
		code, why = codes.InvalidArgument, "empty type_url on ADS"
	case !z.ads && typ == "":
		typeURL = z.fixed
	case !z.ads && typ != z.fixed:
		code, why = codes.InvalidArgument, "type_url of another service"
	}
	if code == codes.OK && !z.classified {
		if !withNode {
			code, why = codes.InvalidArgument, "first request without node"
		}
		z.classified = true
	}
	return typeURL, code, why
}

// overLimit predicts the stream limits: a list of more names than
// limits.max_resource_names, or a type new to a stream that has types
// already (as many as it may).
func (z *streamFuzz) overLimit(types int, newType bool, lists ...[]string) (codes.Code, string) {
	for _, l := range lists {
		if len(l) > z.maxNames {
			return codes.ResourceExhausted, "too many names"
		}
	}
	if newType && types >= z.maxTypes {
		return codes.ResourceExhausted, "too many types"
	}
	return codes.OK, ""
}

// handle runs the reader on req and checks the outcome against the
// prediction.
func handleFuzz[Req any](z *streamFuzz, tr *fuzzTransport[Req], req Req, code codes.Code, why string) {
	tracef(z.t, "request %v", req)
	tr.in = []Req{req}
	wantCode(z.t, z.st.read(), code, why)
}

// addressed checks what every response must satisfy: a fresh nonce, and a
// type URL the client subscribes to, the service's on a per-type stream.
func (z *streamFuzz) addressed(nonce, typeURL string, subscribed bool) {
	t := z.t
	t.Helper()
	if nonce == "" || z.nonces[nonce] {
		t.Fatalf("response nonce %q empty or reused", nonce)
	}
	z.nonces[nonce] = true
	if !subscribed {
		t.Fatalf("%q response on a stream not subscribed to it", typeURL)
	}
	if !z.ads && typeURL != z.fixed {
		t.Fatalf("%q response on a stream of %q", typeURL, z.fixed)
	}
}

// checkTypes compares the stream's per-type state with the model's: the
// same types, each subscribed to want(typeURL), with a shard exactly when
// the subscription is not empty. explicit (SotW), if not nil, is whether
// the model has seen a non-empty resource_names for the type.
func (z *streamFuzz) checkTypes(n int, want func(typeURL string) (sub shard.Subscription, explicit *bool, ok bool)) {
	t := z.t
	t.Helper()
	views := z.st.types()
	if len(views) != n {
		t.Fatalf("stream has %d types, the client subscribed %d", len(views), n)
	}
	for typeURL, v := range views {
		sub, explicit, ok := want(typeURL)
		switch {
		case !ok:
			t.Fatalf("stream has state for %s, the client never asked for it", short(typeURL))
		case explicit != nil && v.explicitSeen != *explicit:
			t.Fatalf("%s: explicitSeen %v, want %v", short(typeURL), v.explicitSeen, *explicit)
		case (v.shard == nil) != sub.Empty():
			t.Fatalf("%s: shard %v, want subscription %+v", short(typeURL), v.shard != nil, sub)
		case !v.sub.Equal(sub):
			t.Fatalf("%s: stream subscription %+v, want %+v", short(typeURL), v.sub, sub)
		case v.shard != nil && !v.shard.Sub.Equal(sub):
			t.Fatalf("%s: subscribed to shard %+v, want %+v", short(typeURL), v.shard.Sub, sub)
		}
	}
}

// current is a shard a stream subscribes to and its current response.
type current struct {
	sh   *shard.Shard
	resp *shard.Response
}

// currents returns, per type, the stream's shard and its current response,
// for those that have one (others have nothing to tell yet).
func (z *streamFuzz) currents() map[string]current {
	out := map[string]current{}
	for typeURL, sh := range z.st.shards() {
		if cur := sh.Current(); cur != nil {
			out[typeURL] = current{sh, cur}
		}
	}
	return out
}

// pickRecent picks a request's version or nonce by sel (two bits): none, the
// last one received, the one before (stale if there is none), or other's.
func pickRecent(sel byte, received []string, stale string, other func() string) string {
	switch n := len(received); sel & 3 {
	case 1:
		if n > 0 {
			return received[n-1]
		}
	case 2:
		if n > 1 {
			return received[n-2]
		}
		return stale
	case 3:
		return other()
	}
	return ""
}

// newFuzzTransport is the fake transport of z's stream.
func newFuzzTransport[Req any](z *streamFuzz) *fuzzTransport[Req] {
	return &fuzzTransport[Req]{ctx: context.Background(), fuzzSent: z.sent}
}

// writeStep runs the writer until nothing is left to send, and returns what
// it sent.
func (z *streamFuzz) writeStep() [][]byte {
	tracef(z.t, "writer step")
	if err := z.st.write(); err != nil {
		z.t.Fatalf("flush: %v", err)
	}
	return z.sent.take()
}
