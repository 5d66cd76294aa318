package relay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// Shared machinery of FuzzSotWRequests and FuzzDeltaRequests: both decode
// the fuzz input into a program of reader steps (one request handled by the
// stream's real read/handle), writer steps (the stream's real
// writeQueued/collect into a fake transport) and upstream steps (class updates),
// run it deterministically on one goroutine, and check invariants after
// each step.

// fuzzTrace (XDS_FUZZ_TRACE=1, with -v) logs each step of a fuzz program,
// to read a failing input: go test -v -run=FuzzDeltaRequests/NAME ./relay/
var fuzzTrace = os.Getenv("XDS_FUZZ_TRACE") != ""

func tracef(t *testing.T, format string, args ...any) {
	if fuzzTrace {
		t.Helper()
		t.Logf(format, args...)
	}
}

// fuzzTypes are the type URLs the stream fuzzers use: one with full-state
// semantics (Cluster) and one without (Endpoint).
var fuzzTypes = [2]string{ClusterType, EndpointType}

// fuzzNames is the alphabet of the names of the resources the upstream sends.
var fuzzNames = [4]string{"a", "b", "c", "d"}

// fuzzReqNames is the alphabet of names in requests: mostly real names,
// the wildcard, and rarely the invalid empty name.
var fuzzReqNames = [16]string{"a", "b", "c", "d", "*", "a", "b", "c", "d", "*", "a", "b", "c", "d", "*", ""}

const fuzzVariants = 3

// fuzzBytes reads a fuzz input byte by byte; exhausted, it yields zeros.
type fuzzBytes struct {
	b []byte
	i int
}

func (f *fuzzBytes) more() bool { return f.i < len(f.b) }

func (f *fuzzBytes) next() byte {
	if f.i >= len(f.b) {
		return 0
	}
	c := f.b[f.i]
	f.i++
	return c
}

// fuzzResources are the resources the fuzzers' upstream applies, built once
// per fuzz target: per type, name and variant.
type fuzzResources struct {
	byKey   map[string][fuzzVariants]*shard.Resource // type + "\x00" + name
	byValue map[string]*shard.Resource               // type + "\x00" + encoded Any value
}

func newFuzzResources(tb testing.TB) *fuzzResources {
	fr := &fuzzResources{byKey: map[string][fuzzVariants]*shard.Resource{}, byValue: map[string]*shard.Resource{}}
	for _, typeURL := range fuzzTypes {
		for _, n := range fuzzNames {
			var vs [fuzzVariants]*shard.Resource
			for v := range fuzzVariants {
				r := resource(tb, typeURL, n, v)
				vs[v] = r
				a := &anypb.Any{}
				if err := proto.Unmarshal(r.Any, a); err != nil {
					tb.Fatal(err)
				}
				fr.byValue[typeURL+"\x00"+string(a.Value)] = r
			}
			fr.byKey[typeURL+"\x00"+n] = vs
		}
	}
	return fr
}

func (fr *fuzzResources) get(typeURL, name string, v int) *shard.Resource {
	return fr.byKey[typeURL+"\x00"+name][v%fuzzVariants]
}

// identify returns the resource a received Any is, or fails: the relay
// must send exactly the bytes the upstream gave it.
func (fr *fuzzResources) identify(t *testing.T, typeURL string, a *anypb.Any) *shard.Resource {
	t.Helper()
	if a.GetTypeUrl() != typeURL {
		t.Fatalf("resource of type %q in a %q response", a.GetTypeUrl(), typeURL)
	}
	r := fr.byValue[typeURL+"\x00"+string(a.GetValue())]
	if r == nil {
		t.Fatalf("%s response carries a resource the upstream never sent: %v", short(typeURL), a)
	}
	return r
}

// decode reads n resources of an upstream update: per resource a byte, its
// name and its variant.
func (fr *fuzzResources) decode(in *fuzzBytes, typeURL string, n int) []*shard.Resource {
	var rs []*shard.Resource
	for range n {
		b := in.next()
		rs = append(rs, fr.get(typeURL, fuzzNames[b%4], int(b>>2)))
	}
	return rs
}

// fuzzUpstream is the source feeding the class, of one kind for a run as
// for a relay: the file source (every update the complete state), an SotW
// upstream (complete state for Listener and Cluster, merged updates
// otherwise) or an incremental one (exact updates with removals).
type fuzzUpstream struct {
	t        *testing.T
	kind     int
	res      *fuzzResources
	class    *shard.Class
	reported map[string]bool // types the upstream reported a request for
}

const (
	fuzzFileSource = iota
	fuzzSotWUpstream
	fuzzDeltaUpstream
)

func newFuzzUpstream(t *testing.T, header byte, res *fuzzResources, class *shard.Class) *fuzzUpstream {
	kind := [4]int{fuzzFileSource, fuzzSotWUpstream, fuzzDeltaUpstream, fuzzDeltaUpstream}[(header>>4)&3]
	return &fuzzUpstream{t: t, kind: kind, res: res, class: class, reported: map[string]bool{}}
}

// report tells the class what the upstream asked for, as an upstream that
// subscribes by name does before it sends each request. Not for the file
// source, nor for full-state types, whose pending names would start grace
// timers.
func (u *fuzzUpstream) report(typeURL string, want shard.Subscription) {
	if u.kind == fuzzFileSource || xdstype.FullState(typeURL) {
		return
	}
	u.reported[typeURL] = true
	tracef(u.t, "upstream asks for %s %+v", short(typeURL), want)
	u.class.Requested(typeURL, want, u.kind == fuzzDeltaUpstream)
}

// step runs an upstream step. Bits of o: 2 the type; 3 a report of what the
// upstream asked for (else an update); 4 (report) the wildcard (else the
// class's interest); 5-6 (update) the number of resources, then, for an
// incremental upstream, a byte with the number of removed names and theirs.
func (u *fuzzUpstream) step(in *fuzzBytes, o byte) {
	typeURL := fuzzTypes[(o>>2)&1]
	if o&8 != 0 {
		want := u.class.Interest(typeURL)
		if o&16 != 0 {
			want = shard.Subscription{Wildcard: true}
		}
		u.report(typeURL, want)
		return
	}
	if !u.reported[typeURL] {
		// An upstream answers requests: the first one is reported before
		// any data of the type arrives.
		u.report(typeURL, u.class.Interest(typeURL))
	}
	rs := u.res.decode(in, typeURL, int(o>>5)&3)
	if fuzzTrace {
		var desc []string
		for _, r := range rs {
			desc = append(desc, r.Name+"@"+r.Version()[:4])
		}
		tracef(u.t, "upstream (kind %d) sends %s %v", u.kind, short(typeURL), desc)
	}
	switch u.kind {
	case fuzzFileSource:
		u.class.Apply(typeURL, rs, true)
	case fuzzSotWUpstream:
		u.class.Apply(typeURL, rs, xdstype.FullState(typeURL))
	case fuzzDeltaUpstream:
		var removed []string
		for range int(in.next() % 4) {
			removed = append(removed, fuzzNames[in.next()%4])
		}
		tracef(u.t, "upstream removes %s %v", short(typeURL), removed)
		applyDelta(u.class, typeURL, rs, removed)
	}
}

// errStep ends one reader step: the fake transport has no more requests.
var errStep = errors.New("fuzz: step done")

// fuzzTransport is the fake gRPC stream the fuzzers drive a stream through:
// Recv hands out the step's requests, SendMsg records what the writer sends.
type fuzzTransport[Req any] struct {
	ctx context.Context
	in  []Req
	*fuzzSent
}

// fuzzSent is what a fuzzed stream's writer sent, as wire bytes.
type fuzzSent struct{ sent [][]byte }

func (f *fuzzTransport[Req]) Context() context.Context { return f.ctx }

func (f *fuzzTransport[Req]) Recv() (Req, error) {
	var zero Req
	if len(f.in) == 0 {
		return zero, errStep
	}
	r := f.in[0]
	f.in = f.in[1:]
	return r, nil
}

// SendMsg encodes the message at once with the relay's codec and frees the
// buffers, as gRPC does: the writer reuses a message once SendMsg returns.
func (f *fuzzSent) SendMsg(m any) error {
	if _, ok := m.(*wire.Stamped); !ok {
		return fmt.Errorf("writer sent a %T, want *wire.Stamped", m)
	}
	bufs, err := wire.NewCodec().Marshal(m)
	if err != nil {
		return err
	}
	f.sent = append(f.sent, bufs.Materialize())
	bufs.Free()
	return nil
}

// take returns what was sent since the last call, as wire bytes.
func (f *fuzzSent) take() [][]byte {
	out := f.sent
	f.sent = nil
	return out
}

// fuzzServer is a relay server over a fresh registry (no upstream: the
// fuzzer applies resources itself) and the class the fuzz node maps to.
func fuzzServer(limitTypes, limitNames bool) (*Server, *shard.Class, *corev3.Node) {
	return fuzzServerWith(nil, limitTypes, limitNames)
}

// fuzzServerWith is fuzzServer with the registry's class start hook (see
// shard.NewRegistryWith).
func fuzzServerWith(start func(*shard.Class) func(string), limitTypes, limitNames bool) (*Server, *shard.Class, *corev3.Node) {
	classifier, err := shard.NewClassifier(nil)
	if err != nil {
		panic(err)
	}
	registry := shard.NewRegistryWith(classifier, start, shard.Lifecycle{})
	opts := Options{}
	if limitTypes {
		opts.MaxTypesPerStream = 1
	}
	if limitNames {
		opts.MaxResourceNames = 2
	}
	srv := NewServer(registry, zap.NewNop(), opts)
	node := &corev3.Node{Id: "fuzz-node", Cluster: "fuzz-class"}
	class, err := registry.Acquire(node)
	if err != nil {
		panic(err)
	}
	return srv, class, node
}

// wantCode checks a reader step's outcome against the model's prediction:
// nil for a good request, a gRPC status of the predicted code for a bad one.
func wantCode(t *testing.T, err error, want codes.Code, why string) {
	t.Helper()
	if err == errStep {
		err = nil
	}
	if want == codes.OK {
		if err != nil {
			t.Fatalf("good request rejected: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("bad request accepted (%s); want %v", why, want)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("bad request (%s): error %v is not a gRPC status", why, err)
	}
	if st.Code() != codes.InvalidArgument && st.Code() != codes.ResourceExhausted {
		t.Fatalf("bad request (%s): code %v, want InvalidArgument or ResourceExhausted", why, st.Code())
	}
	if st.Code() != want {
		t.Fatalf("bad request (%s): code %v (%v), want %v", why, st.Code(), err, want)
	}
}

// checkWatched checks the class's shards against what the stream holds: one
// shard per subscribed type, watched once, and no shard nobody watches.
func checkWatched(t *testing.T, class *shard.Class, held map[string]*shard.Shard) {
	t.Helper()
	for _, ts := range class.Status() {
		sh := held[ts.TypeURL]
		switch {
		case sh == nil && len(ts.Shards) > 0:
			t.Fatalf("%s: class has %d shards, the stream subscribes to none: %+v", short(ts.TypeURL), len(ts.Shards), ts.Shards)
		case sh != nil && len(ts.Shards) != 1:
			t.Fatalf("%s: class has %d shards, want the stream's one: %+v", short(ts.TypeURL), len(ts.Shards), ts.Shards)
		case sh != nil && (ts.Shards[0].Streams != 1 || ts.Shards[0].Wildcard != sh.Sub.Wildcard || fmt.Sprint(ts.Shards[0].Names) != fmt.Sprint(sh.Sub.Names)):
			t.Fatalf("%s: class shard %+v, want the stream's %+v watched once", short(ts.TypeURL), ts.Shards[0], sh.Sub)
		}
	}
}

// subOf builds the normalised subscription of a model's wildcard and names.
func subOf(wildcard bool, names map[string]bool) shard.Subscription {
	var ns []string
	for n, ok := range names {
		if ok {
			ns = append(ns, n)
		}
	}
	return shard.NewSubscription(ns, wildcard)
}

// typeSel decodes a request's type URL: "", or one of fuzzTypes.
func typeSel(b byte) string {
	switch b & 3 {
	case 0:
		return ""
	case 2:
		return fuzzTypes[1]
	}
	return fuzzTypes[0]
}

// Building blocks of fuzz programs, for the seeds.
const (
	// Header bits.
	fzADS      = 0      // ADS stream
	fzPerType  = 1      // per-type stream ...
	fzOfEDS    = 2      // ... of EndpointType (else ClusterType)
	fzOneType  = 4      // MaxTypesPerStream 1
	fzFewNames = 8      // MaxResourceNames 2
	fzFile     = 0 << 4 // the file source feeds the class
	fzSotWUp   = 1 << 4 // an SotW upstream
	fzDeltaUp  = 2 << 4 // an incremental upstream
	fzCDS      = 1      // request type: ClusterType ("" is 0)
	fzEDS      = 2      // request type: EndpointType
	fzNoNode   = 4      // request without node
)

type fuzzProgram []byte

func program(header byte) *fuzzProgram { p := fuzzProgram{header}; return &p }

func (p *fuzzProgram) add(b ...byte) *fuzzProgram { *p = append(*p, b...); return p }

func (p *fuzzProgram) flush() *fuzzProgram { return p.add(2) }

// data is an upstream update of fuzzTypes[typ] (file source, SotW upstream).
func (p *fuzzProgram) data(typ int, rs ...byte) *fuzzProgram {
	return p.add(1 | byte(typ)<<2 | byte(len(rs))<<5).add(rs...)
}

// delta is an incremental upstream's update of fuzzTypes[typ].
func (p *fuzzProgram) delta(typ int, rs []byte, removed ...string) *fuzzProgram {
	p.data(typ, rs...).add(byte(len(removed)))
	for _, n := range removed {
		p.add(byte(slices.Index(fuzzNames[:], n)))
	}
	return p
}

// report is the upstream's report of what it asked for: the class's
// interest, or the wildcard.
func (p *fuzzProgram) report(typ int, wildcard bool) *fuzzProgram {
	o := 1 | byte(typ)<<2 | 8
	if wildcard {
		o |= 16
	}
	return p.add(o)
}

func reqNameIndex(n string) byte {
	if n == "" {
		return 15
	}
	return byte(slices.Index(fuzzReqNames[:], n))
}

// res encodes a resource of an update: name (a..d) and variant.
func res(name string, variant int) byte {
	return byte(slices.Index(fuzzNames[:], name)) | byte(variant)<<2
}
