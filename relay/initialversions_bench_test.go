package relay

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
)

// BenchmarkDeltaReconnectInitialVersions is one turn of S12's reconnect
// loop as the relay sees it after gRPC: a delta stream opens, decodes a
// request declaring n initial_resource_versions of a class holding those n
// endpoints, is answered, and ends. go test -bench DeltaReconnect
// -cpuprofile shows where a turn's time goes.
func BenchmarkDeltaReconnectInitialVersions(b *testing.B) {
	srv, class, node := fuzzServer(false, false)
	names, initial := reconnectState(b, class)
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

// BenchmarkReconnectLoopCPU is S12's reconnect loop over gRPC from one
// peer: each attempt opens a delta stream, sends n initial_resource_versions
// (2.6 MB at n = 60000), waits for the answer or the refusal, and closes.
// It reports the relay process's CPU per attempt (cpu-ms/op, from
// getrusage: client and server share the process, so it includes the
// client's encoding), served (off: no per-peer rate) and refused (the
// peer's bucket empty: limits.streams_per_peer_per_second refuses the
// stream before its request is decoded); client-encode is the client's
// proto.Marshal of the request alone, to subtract. The loop's CPU at a rate r, with
// the peer's rate p < r, is p × served + (r − p) × refused.
//
//	go test -run XXX -bench ReconnectLoopCPU -benchtime 30x ./relay/
func BenchmarkReconnectLoopCPU(b *testing.B) {
	for _, bc := range []struct {
		name   string
		limits PeerLimits
	}{
		{"off", PeerLimits{}},
		{"refused", PeerLimits{StreamsPerSecond: 1e-6, StreamBurst: 1}},
		{"client-encode", PeerLimits{MaxPeers: -1}}, // no stream: what the client's share is
	} {
		b.Run(bc.name, func(b *testing.B) { benchReconnectLoop(b, bc.limits) })
	}
}

func benchReconnectLoop(b *testing.B, limits PeerLimits) {
	classifier, err := shard.NewClassifier(nil)
	if err != nil {
		b.Fatal(err)
	}
	registry := shard.NewRegistryWith(classifier, nil, shard.Lifecycle{})
	peers := NewPeers(limits)
	srv := NewServer(registry, zap.NewNop(), Options{Peers: peers})
	node := &corev3.Node{Id: "loop", Cluster: "class-a"}
	class, err := registry.Acquire(node)
	if err != nil {
		b.Fatal(err)
	}
	names, initial := reconnectState(b, class)
	g := grpc.NewServer(ServerOptions()...)
	srv.Register(g)
	gate := NewConnGate(0, peers, zap.NewNop(), clientlog.NewGate(1, 64))
	addr := xdstest.ServeGRPC(b, g, gate.Listener, srv.TrackConnections)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	req := &deltaRequest{Node: node, TypeUrl: EndpointType, ResourceNamesSubscribe: names, InitialResourceVersions: initial}
	attempt := func() {
		if limits.MaxPeers < 0 { // the client's share: encoding the request
			if _, err := proto.Marshal(req); err != nil {
				b.Fatal(err)
			}
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := openDelta(ctx, conn, "")
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Send(req) // a refused stream may fail the send
		if _, err := s.Recv(); err != nil && status.Code(err) != codes.ResourceExhausted {
			b.Fatal(err)
		}
	}
	attempt() // the burst's token, and the first connection
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for range b.N {
		attempt()
	}
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	refused := peers.Stats().Refused[3]
	b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
	eventually(b, "streams released", func() bool { return srv.StreamCount() == 0 })
}

// reconnectState gives class the loop's 60,000 endpoints and returns their
// names and the stale versions the loop declares for them.
func reconnectState(b *testing.B, class *shard.Class) ([]string, map[string]string) {
	const n = 60000
	names := make([]string, n)
	rs := make([]*shard.Resource, n)
	initial := make(map[string]string, n)
	for i := range rs {
		names[i] = "cluster-" + strconv.Itoa(i)
		rs[i] = resource(b, EndpointType, names[i], 1)
		initial[names[i]] = "stale-" + strconv.Itoa(i)
	}
	class.Apply(EndpointType, rs, true)
	return names, initial
}
