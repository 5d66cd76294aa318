package relay

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// FuzzSotWRequests drives a real sotwStream through runStreamFuzz (which
// lists the checks of both stream fuzzers and the input format) against a
// model of a SotW client, which keeps what it received and forgets what it
// unsubscribes. Besides the shared checks:
//
//   - every response has a version that always denotes the same content,
//     and carries any resource for the wildcard;
//   - a version is never sent twice in a row for a type unless the client
//     subscribed to something new in between;
//   - the subscription follows the resource_names rules (legacy wildcard,
//     "*", empty list);
//   - after each writer step the client holds the current content of its
//     shard (unless it is an empty response of a type without full-state
//     semantics, a no-op).
//
// Requests: see sotwFuzz.request; seeds: sotwSeeds.
func FuzzSotWRequests(f *testing.F) {
	fuzzStream(f, sotwSeeds(), func(z *streamFuzz, srv *Server) fuzzModel {
		m := &sotwFuzz{streamFuzz: z, tr: newFuzzTransport[*request](z),
			types: map[string]*sotwFuzzType{}, contents: map[string]string{}}
		z.st = sotwUnderTest(srv, m.tr, z.service())
		return m
	})
}

// sotwFuzzType is the client's view of one type URL.
type sotwFuzzType struct {
	explicitSeen bool
	sub          shard.Subscription // predicted from the spec's rules
	nonces       []string           // received, in order
	versions     []string           // received, in order
	held         map[string]string  // name -> Any value held; nil before any response
	heldUnknown  bool               // claimed a version whose content the client does not know
	forceOK      bool               // subscribed to something new since the last response
}

// sotwFuzz is the SotW client model of FuzzSotWRequests.
type sotwFuzz struct {
	*streamFuzz
	tr *fuzzTransport[*request]

	types      map[string]*sotwFuzzType
	lastNonce  string
	contents   map[string]string // type + version -> content it denoted
	reconnectV string            // version and content of the last reconnect pick
	reconnectC map[string]string
}

// request runs one reader step; it reports whether the stream lives on.
// Bits of the first byte: 0-1 type, 2 no node, 3-4 version_info, 5-6 nonce,
// 7 NACK (see the fz* constants); the second is the number of names (mod 6),
// then one byte per name.
func (z *sotwFuzz) request(in *fuzzBytes) bool {
	r1, r2 := in.next(), in.next()
	typ := typeSel(r1)
	names := []string(nil)
	for range int(r2 % 6) {
		names = append(names, fuzzReqNames[in.next()%16])
	}

	// What handle must make of it.
	withNode := r1&4 == 0
	typeURL, code, why := z.admit(typ, withNode)
	m := z.types[typeURL]
	if code == codes.OK {
		code, why = z.overLimit(len(z.types), m == nil, names)
	}

	req := &request{TypeUrl: typ, ResourceNames: names}
	if withNode {
		req.Node = z.node
	}
	var versions, nonces []string
	if m != nil {
		versions, nonces = m.versions, m.nonces
	}
	req.VersionInfo = pickRecent(r1>>3, versions, "stale-version", func() string { return z.reconnectVersion(typeURL) })
	req.ResponseNonce = pickRecent(r1>>5, nonces, "stale-nonce", func() string { return z.lastNonce })
	if r1&0x80 != 0 {
		req.ErrorDetail = statusProto("fuzz: rejected")
	}
	if code == codes.OK && !z.stale(m, req.ResponseNonce) && z.namesAfter(typeURL, names) > z.maxNames {
		// limits.max_resource_names bounds a SotW stream's names across
		// its types too; a stale request changes nothing, so is not
		// counted.
		code, why = codes.ResourceExhausted, "stream subscribed to too many names"
	}

	handleFuzz(z.streamFuzz, z.tr, req, code, why)
	if code != codes.OK {
		return false
	}

	first := m == nil
	if first {
		m = &sotwFuzzType{}
		z.types[typeURL] = m
	} else if z.stale(m, req.ResponseNonce) {
		// Stale: ignored, subscription changes included; but names set
		// end the legacy wildcard all the same.
		m.explicitSeen = m.explicitSeen || len(names) > 0
		return true
	}
	prev := m.sub
	wildcard, set := false, map[string]bool{}
	for _, n := range names {
		if n == shard.Wildcard {
			wildcard = true
		} else if n != "" { // "" matches nothing
			set[n] = true
		}
	}
	if !m.explicitSeen && len(names) == 0 {
		wildcard = true // legacy wildcard
	}
	m.explicitSeen = m.explicitSeen || len(names) > 0
	m.sub = subOf(wildcard, set)
	if !m.sub.Wildcard {
		// The client forgets what it no longer subscribes to (it will not
		// learn of its deletion). A stale request, which the server
		// ignores, the client sends again: it is as if not sent yet.
		for n := range m.held {
			if !m.sub.Has(n) {
				delete(m.held, n)
			}
		}
	}
	if !m.sub.Empty() {
		added := m.sub.Wildcard && !prev.Wildcard
		for _, n := range m.sub.Names {
			added = added || !slices.Contains(prev.Names, n)
		}
		if first || prev.Empty() || added {
			m.forceOK = true
		}
	}
	if first && wildcard && len(set) == 0 && xdstype.FullState(typeURL) && req.VersionInfo != "" {
		// A reconnecting client declares the version it holds.
		if req.VersionInfo == z.reconnectV && z.reconnectC != nil {
			m.held = maps.Clone(z.reconnectC)
		} else {
			m.held, m.heldUnknown = nil, true
		}
	}
	z.checkSubscriptions()
	return true
}

// reconnectVersion is the version a client of another relay of the tier
// would hold: the class's wildcard content of typeURL.
func (z *sotwFuzz) reconnectVersion(typeURL string) string {
	w := &fuzzNopWatcher{}
	sh, err := z.class.TrySubscribe(typeURL, shard.Subscription{Wildcard: true}, w)
	if err != nil {
		z.t.Fatal(err)
	}
	defer z.class.Unsubscribe(sh, w)
	cur := sh.Current()
	if cur == nil {
		return "stale-version"
	}
	z.reconnectV, z.reconnectC = cur.Version, z.contentOf(cur.Resources)
	return cur.Version
}

func (z *sotwFuzz) contentOf(rs []*shard.Resource) map[string]string {
	out := map[string]string{}
	for _, r := range rs {
		a := &anypb.Any{}
		if err := proto.Unmarshal(r.Any, a); err != nil {
			z.t.Fatal(err)
		}
		out[r.Name] = string(a.Value)
	}
	return out
}

// received takes what the client receives in a writer step.
func (z *sotwFuzz) received(sent [][]byte) {
	for _, b := range sent {
		z.receive(b)
	}
	z.checkSubscriptions()
	z.checkSync()
}

func (z *sotwFuzz) receive(b []byte) {
	t := z.t
	var resp response
	if err := proto.Unmarshal(b, &resp); err != nil {
		t.Fatalf("response does not decode: %v", err)
	}
	typeURL := resp.TypeUrl
	tracef(t, "response %s version %s nonce %s: %v", short(typeURL), resp.VersionInfo, resp.Nonce, names(t, &resp))
	m := z.types[typeURL]
	z.addressed(resp.Nonce, typeURL, m != nil && !m.sub.Empty())
	if resp.VersionInfo == "" {
		t.Fatalf("%s response without version_info", short(typeURL))
	}
	content := map[string]string{}
	for _, a := range resp.Resources {
		r := z.res.identify(t, typeURL, a)
		if n := resourceName(t, a); n != r.Name {
			t.Fatalf("resource %q decodes as %q", r.Name, n)
		}
		if _, dup := content[r.Name]; dup {
			t.Fatalf("%s response carries %q twice", short(typeURL), r.Name)
		}
		if !m.sub.Wildcard && !m.sub.Has(r.Name) {
			t.Fatalf("%s response carries %q, not subscribed (%+v)", short(typeURL), r.Name, m.sub)
		}
		content[r.Name] = string(a.Value)
	}
	key, canon := typeURL+"\x00"+resp.VersionInfo, canonical(content)
	if was, ok := z.contents[key]; ok && was != canon {
		t.Fatalf("%s version %s denotes two contents: %s and %s", short(typeURL), resp.VersionInfo, was, canon)
	}
	z.contents[key] = canon
	if n := len(m.versions); n > 0 && m.versions[n-1] == resp.VersionInfo && !m.forceOK {
		t.Fatalf("%s version %s sent twice in a row, the subscription added nothing", short(typeURL), resp.VersionInfo)
	}
	m.versions = append(m.versions, resp.VersionInfo)
	m.nonces = append(m.nonces, resp.Nonce)
	z.lastNonce = resp.Nonce
	m.held, m.heldUnknown, m.forceOK = content, false, false
}

func canonical(content map[string]string) string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(content)) {
		b.WriteString(n)
		b.WriteByte('=')
		b.WriteString(content[n])
		b.WriteByte(0)
	}
	return b.String()
}

// checkSubscriptions compares the stream's subscriptions with the model's.
func (z *sotwFuzz) checkSubscriptions() {
	z.checkTypes(len(z.types), func(typeURL string) (shard.Subscription, *bool, bool) {
		m := z.types[typeURL]
		if m == nil {
			return shard.Subscription{}, nil, false
		}
		return m.sub, &m.explicitSeen, true
	})
}

// checkSync requires, after a writer step, that the client holds its
// shards' current content.
func (z *sotwFuzz) checkSync() {
	t := z.t
	for typeURL, sc := range z.currents() { // checkSubscriptions: each has a model
		m, cur := z.types[typeURL], sc.resp
		if len(cur.Names) == 0 && !xdstype.FullState(typeURL) {
			continue // a no-op to tell
		}
		if m.held == nil {
			t.Fatalf("%s: client never got the shard's content %s %v (claimed unknown: %v)", short(typeURL), cur.Version, cur.Names, m.heldUnknown)
		}
		held := map[string]string{}
		for n, v := range m.held {
			if m.sub.Wildcard || m.sub.Has(n) {
				held[n] = v
			}
		}
		if want := z.contentOf(cur.Resources); !maps.Equal(held, want) {
			t.Fatalf("%s: client holds %v of its subscription %+v, shard is at %s %v", short(typeURL),
				slices.Sorted(maps.Keys(held)), m.sub, cur.Version, cur.Names)
		}
	}
}

// fuzzNopWatcher watches a shard briefly, to read its content.
type fuzzNopWatcher struct{ _ byte }

func (*fuzzNopWatcher) ShardChanged(*shard.Shard, *shard.Response)    {}
func (*fuzzNopWatcher) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) {}

func sotwSeeds() [][]byte {
	const cds, eds = 0, 1
	return [][]byte{
		// Legacy wildcard, ACK, update, explicit names, "*", unsubscribe all.
		*program(fzADS|fzFile).sotwReq(fzCDS).data(cds, res("a", 0), res("b", 0)).flush().
			sotwReq(fzCDS|fzVerLast|fzNonce).data(cds, res("a", 1), res("b", 0)).flush().
			sotwReq(fzCDS|fzVerLast|fzNonce, "a", "c").flush().
			sotwReq(fzCDS|fzVerLast|fzNonce, "*").flush().
			sotwReq(fzCDS|fzVerLast|fzNonce).flush().
			sotwReq(fzCDS|fzVerLast|fzNonce, "b").flush(),
		// Explicit names of a type without full-state semantics, NACK,
		// names added that exist, then do not, then appear.
		*program(fzADS|fzSotWUp).data(eds, res("a", 0)).sotwReq(fzEDS, "a", "b").flush().
			sotwReq(fzEDS|fzVerLast|fzNonce|fzNACK, "a", "b").data(eds, res("b", 1)).flush().
			sotwReq(fzEDS|fzVerLast|fzNonce, "a", "b", "c").flush().
			data(eds, res("c", 2)).flush().
			sotwReq(fzEDS|fzVerLast|fzNonce, "a").flush().
			sotwReq(fzEDS|fzVerLast|fzNonce, "a", "c").flush(),
		// Per-type stream with empty type URLs; a reconnect declaring the
		// tier's version.
		*program(fzPerType|fzFile).data(cds, res("a", 0), res("c", 1)).sotwReq(fzVerTier).flush().
			data(cds, res("a", 0)).flush().sotwReq(fzVerLast | fzNonce).flush(),
		*program(fzPerType|fzFile).sotwReq(fzVerOld).data(cds, res("b", 2)).flush(),
		// Stale nonces: ignored, subscription changes included.
		*program(fzADS|fzFile).sotwReq(fzCDS, "a").data(cds, res("a", 0)).flush().
			data(cds, res("a", 1)).flush().
			sotwReq(fzCDS|fzVerOld|fzNonceOld, "b").flush().
			sotwReq(fzCDS|fzVerLast|fzNonce, "b").data(cds, res("a", 1), res("b", 1)).flush(),
		// Two types, interleaved; the last nonce of the other type is stale.
		*program(fzADS|fzSotWUp).sotwReq(fzCDS).sotwReq(fzEDS, "a").data(eds, res("a", 0)).
			data(cds, res("b", 0)).flush().data(eds, res("a", 1)).
			sotwReq(fzCDS|fzNonceAny, "*", "a").flush().
			report(eds, false).data(eds).flush().sotwReq(fzEDS | fzNonce).flush(),
		// The upstream asked for named resources only: the wildcard shard
		// waits for a complete state.
		*program(fzADS|fzSotWUp).sotwReq(fzEDS, "*").report(eds, false).data(eds, res("a", 0)).flush().
			report(eds, true).data(eds, res("b", 0)).flush(),
		// An incremental upstream: removals, names it has not answered.
		*program(fzADS|fzDeltaUp).delta(eds, []byte{res("a", 0), res("b", 0)}).sotwReq(fzEDS, "a", "c").flush().
			report(eds, false).delta(eds, nil, "a").flush().sotwReq(fzEDS|fzVerLast|fzNonce, "b", "c").flush().
			delta(eds, []byte{res("c", 1)}, "b").flush(),
		// The empty name matches nothing: [""] unsubscribes, the stream lives.
		*program(fzADS).data(cds, res("a", 0)).sotwReq(fzCDS, "a", "").flush().sotwReq(fzCDS|fzVerLast|fzNonce, "").flush().
			data(cds, res("a", 1)).flush(),
		// Bad requests: each ends the stream.
		*program(fzADS).sotwReq(0, "a"),
		*program(fzADS).sotwReq(fzCDS|fzNoNode, "a"),
		*program(fzADS|fzFewNames).sotwReq(fzCDS, "a", "b", "c"),
		*program(fzADS|fzOneType).sotwReq(fzCDS, "a").sotwReq(fzEDS, "a"),
		*program(fzPerType|fzOfEDS).sotwReq(fzEDS, "a").flush().sotwReq(fzCDS, "a"),
	}
}

// sotwReq is a SotW request step: the first byte (fz* request bits) and
// the names.
func (p *fuzzProgram) sotwReq(r1 byte, names ...string) *fuzzProgram {
	p.add(0, r1, byte(len(names)))
	for _, n := range names {
		p.add(reqNameIndex(n))
	}
	return p
}

// SotW request bits of the first byte.
const (
	fzVerLast  = 1 << 3 // version_info: the last received
	fzVerOld   = 2 << 3 // the one before, or a stale one
	fzVerTier  = 3 << 3 // the class's wildcard version (a reconnect)
	fzNonce    = 1 << 5 // response_nonce: the last of the type
	fzNonceOld = 2 << 5 // an older one of the type
	fzNonceAny = 3 << 5 // the last of any type
	fzNACK     = 0x80
)

// stale reports whether a request of a type the client has (m; nil: a new
// type) answers an older response than the type's last: the server ignores
// it.
func (z *sotwFuzz) stale(m *sotwFuzzType, nonce string) bool {
	if m == nil {
		return false
	}
	n := len(m.nonces)
	return n > 0 && nonce != m.nonces[n-1]
}

// namesAfter is the number of names the stream would be subscribed to over
// all its types once typeURL's subscription is the one names ask for.
func (z *sotwFuzz) namesAfter(typeURL string, names []string) int {
	total := len(shard.NewSubscription(names, false).Names)
	for t, m := range z.types {
		if t != typeURL {
			total += len(m.sub.Names)
		}
	}
	return total
}
