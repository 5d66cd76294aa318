package relay

import (
	"maps"
	"slices"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/shard"
)

// FuzzDeltaRequests drives a real deltaStream through runStreamFuzz (which
// lists the checks of both stream fuzzers and the input format) against a
// model of a delta client, which applies responses (resources add or
// replace, removals delete), declares versions on reconnect
// (initial_resource_versions) and drops what it unsubscribes. Besides the
// shared checks:
//
//   - every response has a system version, resources at their content
//     version and no name both sent and removed; an empty response is only
//     the first answer to a wildcard;
//   - a removed name is never one the subscription covers and its shard
//     holds, unless a later response of the same writer step sends it;
//   - after each writer step, the client holds every resource of its
//     shard's current content at its version, and nothing it covers that
//     the shard knows does not exist.
//
// Requests: see deltaFuzz.request; seeds: deltaSeeds.
// testdata/fuzz/FuzzDeltaRequests holds the inputs that found bugs, replayed
// by go test; run one with the steps logged:
// XDS_FUZZ_TRACE=1 go test -v -run=FuzzDeltaRequests/NAME ./relay/
func FuzzDeltaRequests(f *testing.F) {
	fuzzStream(f, deltaSeeds(), func(z *streamFuzz, srv *Server) fuzzModel {
		m := &deltaFuzz{streamFuzz: z, tr: newFuzzTransport[*deltaRequest](z), types: map[string]*deltaFuzzType{}}
		z.st = deltaUnderTest(srv, m.tr, z.service())
		return m
	})
}

// deltaFuzzType is the client's view of one type URL.
type deltaFuzzType struct {
	wildcard bool
	names    map[string]bool   // explicit subscriptions
	held     map[string]string // name -> version held
	nonces   []string
	told     bool // received a response
}

func (m *deltaFuzzType) covers(name string) bool { return m.wildcard || m.names[name] }

// deltaFuzz is the delta client model of FuzzDeltaRequests.
type deltaFuzz struct {
	*streamFuzz
	tr *fuzzTransport[*deltaRequest]

	types map[string]*deltaFuzzType
}

// request runs one reader step; it reports whether the stream lives on.
// Bits of the first byte: 0-1 type, 2 no node, 3-4 nonce, 5 NACK, 6 with
// initial_resource_versions; of the second: 0-1 subscribed names, 2-3
// unsubscribed names, 4-5 initial versions.
func (z *deltaFuzz) request(in *fuzzBytes) bool {
	r1, r2 := in.next(), in.next()
	typ := typeSel(r1)
	var sub, unsub []string
	for range int(r2 & 3) {
		sub = append(sub, fuzzReqNames[in.next()%16])
	}
	for range int(r2>>2) & 3 {
		unsub = append(unsub, fuzzReqNames[in.next()%16])
	}

	withNode := r1&4 == 0
	typeURL, code, why := z.admit(typ, withNode)
	m := z.types[typeURL]
	if code == codes.OK {
		code, why = z.overLimit(len(z.types), m == nil, sub, unsub)
	}

	req := &deltaRequest{TypeUrl: typ, ResourceNamesSubscribe: sub, ResourceNamesUnsubscribe: unsub}
	if withNode {
		req.Node = z.node
	}
	if r1&0x40 != 0 {
		req.InitialResourceVersions = map[string]string{}
		for range int(r2>>4) & 3 {
			b := in.next()
			name, v := fuzzNames[b%4], "stale-version"
			if p := int(b>>2) & 3; p < fuzzVariants && typeURL != "" {
				v = z.res.get(typeURL, name, p).Version()
			}
			req.InitialResourceVersions[name] = v
		}
	}
	var nonces []string
	if m != nil {
		nonces = m.nonces
	}
	req.ResponseNonce = pickRecent(r1>>3, nonces, "stale-nonce", func() string { return "bogus" })
	if r1&0x20 != 0 {
		req.ErrorDetail = statusProto("fuzz: rejected")
	}

	if code == codes.OK {
		// A delta stream's subscription is the sum of its requests:
		// limits.max_resource_names bounds it across types, and bounds the
		// initial_resource_versions of one request.
		if len(req.InitialResourceVersions) > z.maxNames {
			code, why = codes.ResourceExhausted, "too many initial_resource_versions"
		} else if z.namesAfter(typeURL, sub, unsub) > z.maxNames {
			code, why = codes.ResourceExhausted, "stream subscribed to too many names"
		}
	}

	handleFuzz(z.streamFuzz, z.tr, req, code, why)
	if code != codes.OK {
		return false
	}

	// The client's side of the request: subscriptions (spec "Incremental
	// xDS"), the versions it declares on the first request of the type, and
	// what it drops when it unsubscribes.
	first := m == nil
	if first {
		m = &deltaFuzzType{names: map[string]bool{}, held: map[string]string{}}
		z.types[typeURL] = m
		if len(sub) == 0 && len(unsub) == 0 {
			m.wildcard = true
		}
	}
	for _, n := range sub {
		if n == shard.Wildcard {
			if !m.wildcard {
				m.told = false // a wildcard newly subscribed is answered, even empty
			}
			m.wildcard = true
		} else if n != "" { // "" matches nothing
			m.names[n] = true
		}
	}
	if first {
		maps.Copy(m.held, req.InitialResourceVersions)
	}
	for _, n := range unsub {
		switch {
		case n == shard.Wildcard && m.wildcard:
			m.wildcard = false
			for h := range m.held {
				if !m.names[h] {
					delete(m.held, h) // held only through the wildcard
				}
			}
		case m.names[n]:
			delete(m.names, n)
			delete(m.held, n)
		}
	}
	z.checkSubscriptions()
	return true
}

// received takes what the client receives in a writer step.
func (z *deltaFuzz) received(sent [][]byte) {
	t := z.t
	var batch []*deltaResponse
	for _, b := range sent {
		batch = append(batch, z.receive(b))
	}
	z.checkSubscriptions()

	for typeURL, sc := range z.currents() { // checkSubscriptions: each has a model
		m, sh, cur := z.types[typeURL], sc.sh, sc.resp
		// Removed names: never one covered that exists, unless sent again
		// later in the step.
		for i, resp := range batch {
			if resp.TypeUrl != typeURL {
				continue
			}
			for _, n := range resp.RemovedResources {
				if !m.covers(n) || !cur.Has(n) {
					continue
				}
				resent := false
				for _, later := range batch[i+1:] {
					resent = resent || later.TypeUrl == typeURL && slices.ContainsFunc(later.Resources, func(r *discoverygrpc.Resource) bool { return r.Name == n })
				}
				if !resent {
					t.Fatalf("%s: %q reported removed, but the subscription %+v covers it and shard %s holds it", short(typeURL), n, sh.Sub, cur.Version)
				}
			}
		}
		// The client holds the shard's content.
		for _, r := range cur.Resources {
			if v, ok := m.held[r.Name]; !ok || v != r.Version() {
				t.Fatalf("%s: client holds %q at %q (held: %v), shard %s has it at %s", short(typeURL), r.Name, v, ok, cur.Version, r.Version())
			}
		}
		for n := range m.held {
			if m.covers(n) && cur.KnownAbsent(n) {
				t.Fatalf("%s: client still holds %q, which shard %s (%v) knows does not exist", short(typeURL), n, cur.Version, cur.Names)
			}
		}
	}
}

func (z *deltaFuzz) receive(b []byte) *deltaResponse {
	t := z.t
	resp := &deltaResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		t.Fatalf("delta response does not decode: %v", err)
	}
	typeURL := resp.TypeUrl
	tracef(t, "response %s version %s nonce %s: %v removed %v", short(typeURL), resp.SystemVersionInfo, resp.Nonce, versionsOf(resp), resp.RemovedResources)
	m := z.types[typeURL]
	z.addressed(resp.Nonce, typeURL, m != nil && (m.wildcard || len(m.names) > 0))
	if resp.SystemVersionInfo == "" {
		t.Fatalf("%s response without system_version_info: resources %v removed %v", short(typeURL), deltaNames(resp), resp.RemovedResources)
	}
	if len(resp.Resources) == 0 && len(resp.RemovedResources) == 0 && (m.told || !m.wildcard) {
		t.Fatalf("%s: empty response, and not the first answer to a wildcard", short(typeURL))
	}
	seen := map[string]bool{}
	for _, r := range resp.Resources {
		if r.Resource == nil {
			t.Fatalf("%s: resource %q without body", short(typeURL), r.Name)
		}
		want := z.res.identify(t, typeURL, r.Resource)
		if r.Name != want.Name || r.Version != want.Version() {
			t.Fatalf("%s: entry %q version %q carries %q at version %q", short(typeURL), r.Name, r.Version, want.Name, want.Version())
		}
		if seen[r.Name] {
			t.Fatalf("%s: %q twice in one response", short(typeURL), r.Name)
		}
		seen[r.Name] = true
		if !m.covers(r.Name) {
			t.Fatalf("%s: %q sent, not subscribed (wildcard %v, names %v)", short(typeURL), r.Name, m.wildcard, m.names)
		}
	}
	for _, n := range resp.RemovedResources {
		if n == "" || seen[n] {
			t.Fatalf("%s: removed name %q empty, repeated or also sent", short(typeURL), n)
		}
		seen[n] = true
	}
	for _, r := range resp.Resources {
		m.held[r.Name] = r.Version
	}
	for _, n := range resp.RemovedResources {
		delete(m.held, n)
	}
	m.nonces = append(m.nonces, resp.Nonce)
	m.told = true
	return resp
}

// checkSubscriptions compares the stream's subscriptions with the model's.
func (z *deltaFuzz) checkSubscriptions() {
	z.checkTypes(len(z.types), func(typeURL string) (shard.Subscription, *bool, bool) {
		m := z.types[typeURL]
		if m == nil {
			return shard.Subscription{}, nil, false
		}
		return subOf(m.wildcard, m.names), nil, true
	})
}

// deltaReq is a delta request step of a seed program.
func (p *fuzzProgram) deltaReq(r1 byte, sub, unsub []string, initial ...byte) *fuzzProgram {
	if len(initial) > 0 {
		r1 |= 0x40
	}
	p.add(0, r1, byte(len(sub))|byte(len(unsub))<<2|byte(len(initial))<<4)
	for _, n := range sub {
		p.add(reqNameIndex(n))
	}
	for _, n := range unsub {
		p.add(reqNameIndex(n))
	}
	return p.add(initial...)
}

// initVer is an initial_resource_versions entry: name (a..d) at the
// version of a variant, or (variant 3) a stale version.
func initVer(name string, variant int) byte {
	return byte(slices.Index(fuzzNames[:], name)) | byte(variant)<<2
}

// Delta request nonce picks.
const (
	fzDNonce    = 1 << 3
	fzDNonceOld = 2 << 3
	fzDBogus    = 3 << 3
	fzDNACK     = 0x20
)

func deltaSeeds() [][]byte {
	const cds, eds = 0, 1
	none := []string(nil)
	return [][]byte{
		// Legacy wildcard, ACK, changes, removals by replace.
		*program(fzADS|fzFile).deltaReq(fzCDS, none, none).data(cds, res("a", 0), res("b", 0)).flush().
			deltaReq(fzCDS|fzDNonce, none, none).data(cds, res("a", 1)).flush().
			deltaReq(fzCDS|fzDNonce, []string{"c"}, none).flush().
			data(cds, res("a", 1), res("c", 0)).flush(),
		// Explicit names, then the wildcard, then the spec's exception:
		// unsubscribing a name the wildcard covers.
		*program(fzADS|fzDeltaUp).delta(eds, []byte{res("a", 0), res("b", 0)}).
			deltaReq(fzEDS, []string{"a", "c"}, none).flush().
			deltaReq(fzEDS|fzDNonce, []string{"*"}, none).report(eds, true).delta(eds, nil).flush().
			deltaReq(fzEDS|fzDNonce, none, []string{"a"}).flush().
			deltaReq(fzEDS|fzDNonce, none, []string{"c"}).flush().
			delta(eds, nil, "b").flush().
			deltaReq(fzEDS|fzDNonce, none, []string{"*"}).flush(),
		// A reconnect declaring what it holds: current, stale, gone.
		*program(fzADS|fzFile).data(cds, res("a", 0), res("b", 1)).
			deltaReq(fzCDS, []string{"*"}, none, initVer("a", 0), initVer("b", 0), initVer("c", 1)).flush().
			deltaReq(fzCDS|fzDNonce, none, []string{"*"}).flush(),
		// Declared versions, then the wildcard dropped before any answer.
		*program(fzADS|fzFile).deltaReq(fzCDS, []string{"*", "a"}, none, initVer("a", 1), initVer("b", 1), initVer("c", 1)).
			deltaReq(fzCDS, none, []string{"*"}).flush().
			data(cds, res("a", 1), res("b", 1), res("c", 1)).flush(),
		// A merging source: absence is never known.
		*program(fzADS|fzSotWUp).data(eds, res("b", 0)).
			deltaReq(fzEDS, none, none, initVer("a", 0)).flush().
			data(eds, res("b", 1)).flush(),
		// Names the upstream was asked for and has not answered.
		*program(fzADS|fzDeltaUp).deltaReq(fzEDS, []string{"a", "b"}, none).report(eds, false).
			delta(eds, []byte{res("a", 0)}).flush().
			deltaReq(fzEDS|fzDNonce, []string{"c"}, none).report(eds, false).flush().
			delta(eds, []byte{res("c", 0)}, "b").flush().
			deltaReq(fzEDS|fzDNonce, []string{"*"}, none).report(eds, true).flush(),
		// Stale nonces and NACKs change nothing of the subscription rules.
		*program(fzADS|fzFile).deltaReq(fzCDS, []string{"a"}, none).data(cds, res("a", 0)).flush().
			data(cds, res("a", 2)).flush().
			deltaReq(fzCDS|fzDNonceOld|fzDNACK, []string{"b"}, none).flush().
			deltaReq(fzCDS|fzDBogus, none, []string{"a"}).data(cds, res("b", 0)).flush(),
		// Two types, interleaved, a switch of shard before the writer runs.
		*program(fzADS|fzSotWUp).deltaReq(fzCDS, none, none).deltaReq(fzEDS, []string{"a"}, none).
			data(eds, res("a", 0)).data(cds, res("b", 0)).
			deltaReq(fzEDS, []string{"b"}, []string{"a"}).data(eds, res("b", 1)).flush(),
		// Per-type stream, empty type URLs.
		*program(fzPerType|fzOfEDS|fzDeltaUp).deltaReq(0, []string{"a"}, none).delta(eds, []byte{res("a", 0)}).flush().
			deltaReq(fzEDS|fzDNonce, []string{"b"}, []string{"a"}).flush(),
		// The empty name matches nothing; it ends the legacy wildcard.
		*program(fzADS).data(cds, res("a", 0)).deltaReq(fzCDS, []string{""}, none).flush().
			deltaReq(fzCDS, []string{"a", ""}, []string{""}).flush(),
		// Bad requests: each ends the stream.
		*program(fzADS).deltaReq(0, none, none),
		*program(fzADS).deltaReq(fzCDS|fzNoNode, none, none),
		*program(fzADS|fzFewNames).deltaReq(fzCDS, []string{"a", "b"}, []string{"c", "d"}).deltaReq(fzCDS, none, []string{"a", "b", "c"}),
		*program(fzADS|fzOneType).deltaReq(fzCDS, none, none).deltaReq(fzEDS, none, none),
		*program(fzPerType).deltaReq(fzEDS, none, none),
	}
}

// namesAfter is how many names the stream subscribes to over all its types
// once a request subscribing sub and unsubscribing unsub of typeURL is
// applied ("*" and "" are no names).
func (z *deltaFuzz) namesAfter(typeURL string, sub, unsub []string) int {
	names := map[string]bool{}
	if m := z.types[typeURL]; m != nil {
		maps.Copy(names, m.names)
	}
	for _, n := range sub {
		if n != shard.Wildcard && n != "" {
			names[n] = true
		}
	}
	for _, n := range unsub {
		delete(names, n)
	}
	total := len(names)
	for t, m := range z.types {
		if t != typeURL {
			total += len(m.names)
		}
	}
	return total
}
