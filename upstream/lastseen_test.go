package upstream

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/store"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// clusterAny is the encoded Any of a cluster named name, v telling versions
// of it apart.
func clusterAny(name string, v int) []byte {
	return xdstest.AnyBytes(&clusterv3.Cluster{Name: name, ConnectTimeout: &durationpb.Duration{Seconds: int64(1 + v)}})
}

// wrapped is raw in a Resource wrapper with a TTL.
func wrapped(t *testing.T, name string, raw []byte) []byte {
	t.Helper()
	ttl, err := proto.Marshal(durationpb.New(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return wire.WrappedAny(name, raw, ttl)
}

// response encodes a CDS response of raws, as they are (malformed ones
// too).
func response(t *testing.T, raws ...[]byte) []byte {
	t.Helper()
	var b []byte
	for _, raw := range raws {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, raw)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	return protowire.AppendString(b, clusterType)
}

// validated is what a validator makes of a response: names, their Any
// bytes, TTLs, or the error.
func validated(t *testing.T, v *validator, b []byte) (got []string, fast bool, err error) {
	t.Helper()
	sc := getSotwScratch()
	defer sc.release()
	if err := wire.ParseResponseInto(b, &sc.resp); err != nil {
		t.Fatal(err)
	}
	_, err = sc.validate(v)
	for _, r := range sc.out {
		got = append(got, fmt.Sprintf("%s %x ttl=%x", r.Name, r.Any, r.TTL()))
	}
	// The full path unwraps every resource into a candidate.
	fast = err == nil && len(sc.resp.Resources) > 0 && len(sc.cands) == 0
	return got, fast, err
}

// The fast path's results are the full path's: a validator that knows the
// last response and one that validates each response afresh agree on
// every response of a sequence (resources, order, rejections and their
// reasons), whichever path the first took.
func TestSotwFastPathAgreesWithFullPath(t *testing.T) {
	a, b, c := clusterAny("a", 1), clusterAny("b", 1), clusterAny("c", 1)
	b2 := clusterAny("b", 2)
	many := make([][]byte, 0, 2*maxChanged)
	for i := range 2 * maxChanged {
		many = append(many, clusterAny(fmt.Sprintf("m%d", i), 1))
	}
	eds := xdstest.AnyBytes(&endpointv3.ClusterLoadAssignment{ClusterName: "x"})
	steps := []struct {
		name string
		resp []byte
	}{
		{"first", response(t, a, b, c)},
		{"same, reordered", response(t, c, a, b)},
		{"one changed", response(t, b2, c, a)},
		{"one removed", response(t, a, b2)},
		{"one added", response(t, c, a, b2)},
		{"the same bytes twice", response(t, a, c, a)},
		{"back to normal", response(t, a, b2, c)},
		{"a changed one named as an unchanged one", response(t, a, b2, clusterAny("a", 3))},
		{"a changed one of another type", response(t, a, b2, eds)},
		{"a malformed one", response(t, a, b2, []byte{0x0a, 0x10, 'x'})},
		{"one without a name", response(t, a, b2, xdstest.AnyBytes(&clusterv3.Cluster{AltStatName: "x"}))},
		{"a wrapped one", response(t, a, wrapped(t, "b", b2), c)},
		{"unwrapped again", response(t, a, b2, c)},
		{"many changed", response(t, append([][]byte{a}, many...)...)},
		{"many the same", response(t, append(slices.Clone(many), a)...)},
		{"empty", response(t)},
		{"after empty", response(t, a)},
	}
	v := &validator{store: store.New()}
	fastRuns := 0
	for _, st := range steps {
		got, fast, err := validated(t, v, st.resp)
		want, _, wantErr := validated(t, &validator{store: store.New()}, st.resp)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() || !slices.Equal(got, want) {
			t.Fatalf("%s: got %q, %v; the full path gives %q, %v", st.name, got, err, want, wantErr)
		}
		if fast {
			fastRuns++
		}
	}
	if fastRuns < 5 {
		t.Fatalf("the fast path validated %d responses, want at least 5: it was not exercised", fastRuns)
	}
}

// Only a resource's exact bytes find it in the index: an indexed
// resource whose hash another content shares is not handed out for it.
func TestSotwFastPathChecksBytes(t *testing.T) {
	a, b := clusterAny("a", 1), clusterAny("b", 1)
	v := &validator{store: store.New()}
	if _, _, err := validated(t, v, response(t, a)); err != nil {
		t.Fatal(err)
	}
	// Index an impostor under b's hash, as a hash collision would.
	impostor := &shard.Resource{Name: "impostor", Any: clusterAny("impostor", 1), Hash: dedup.ResourceHash(b)}
	ls := v.last[clusterType]
	ls.table[ls.slot(impostor.Hash, impostor.Any)] = impostor
	got, _, err := validated(t, v, response(t, a, b))
	if err != nil || len(got) != 2 || got[1] != fmt.Sprintf("b %x ttl=", b) {
		t.Fatalf("got %q, %v; want a then b", got, err)
	}
}
