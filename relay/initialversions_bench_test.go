package relay

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/shard"
)

// BenchmarkDeltaReconnectInitialVersions is one turn of S12's reconnect
// loop as the relay sees it after gRPC: a delta stream opens, decodes a
// request declaring n initial_resource_versions of a class holding those n
// endpoints, is answered, and ends. go test -bench DeltaReconnect
// -cpuprofile shows where a turn's time goes.
func BenchmarkDeltaReconnectInitialVersions(b *testing.B) {
	const n = 60000
	srv, class, node := fuzzServer(false, false)
	rs := make([]*shard.Resource, n)
	names := make([]string, n)
	initial := make(map[string]string, n)
	for i := range rs {
		names[i] = "cluster-" + strconv.Itoa(i)
		rs[i] = resource(b, EndpointType, names[i], 1)
		initial[names[i]] = "stale-" + strconv.Itoa(i)
	}
	class.Apply(EndpointType, rs, true)
	wire, err := proto.Marshal(&deltaRequest{Node: node, TypeUrl: EndpointType, ResourceNamesSubscribe: names, InitialResourceVersions: initial})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(wire)))
	b.ResetTimer()
	for range b.N {
		req := &deltaRequest{}
		if err := proto.Unmarshal(wire, req); err != nil {
			b.Fatal(err)
		}
		tr := &fuzzTransport[*deltaRequest]{ctx: context.Background(), fuzzSent: &fuzzSent{}}
		st := newDeltaStream(srv, tr, "", variantDeltaADS)
		if err := st.proto.handle(req); err != nil {
			b.Fatal(err)
		}
		if err := st.writeQueued(); err != nil {
			b.Fatal(err)
		}
		tr.take()
		st.release()
	}
}
