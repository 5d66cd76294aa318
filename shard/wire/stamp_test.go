package wire

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"testing"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// Every nonce stamped decodes as itself after the body, across slab
// boundaries and from concurrent streams sharing an arena.
func TestStampNonces(t *testing.T) {
	bb := NewBodyBuilder("v1", 0)
	body := NewBody(bb.Finish("type.googleapis.com/x"))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := NewStamper(uint64(g) * uint64(len(arenas))) // all in one arena
			for _, n := range []uint64{1, 35, 36, 1 << 20, math.MaxUint64} {
				for i := range 500 { // several slabs
					n := n + uint64(i)
					if n == 0 {
						continue
					}
					m := st.Stamp(body, n)
					var got discoveryv3.DiscoveryResponse
					if err := proto.Unmarshal(m.AppendTo(nil), &got); err != nil {
						errs <- err
						return
					}
					if got.GetNonce() != strconv.FormatUint(n, 36) || got.GetNonce() != NonceString(n) || got.GetVersionInfo() != "v1" {
						errs <- fmt.Errorf("nonce %d decoded as %q", n, got.GetNonce())
						return
					}
					if !NonceIs(got.GetNonce(), n) || NonceIs(got.GetNonce(), n+1) {
						errs <- fmt.Errorf("NonceIs(%q, %d) is wrong", got.GetNonce(), n)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if NonceIs("", 0) || NonceIs("0", 0) || NonceString(0) != "" {
		t.Fatal("nonce 0 is never sent, so nothing matches it")
	}
	if NonceIs("00000000000000000001", 1) || NonceIs("A", 10) || !NonceIs("a", 10) {
		t.Fatal("NonceIs accepts only the nonce's own spelling")
	}
}

// Stamping a cached response for one more stream allocates nothing (the
// bench issue's target): the body is converted once, the nonce suffix is
// carved from a pooled slab. Freeing what gRPC frees after a write returns
// slabs to the pool, so the steady state allocates no slab either.
func TestStampAllocatesNothing(t *testing.T) {
	body := NewBody(NewBodyBuilder("v1", 0).Finish("type.googleapis.com/x"))
	st := NewStamper(3)
	var n uint64
	allocs := testing.AllocsPerRun(10000, func() {
		n++
		m := st.Stamp(body, n)
		m.suffix.Free() // what gRPC does once the message is written
	})
	if allocs != 0 {
		t.Fatalf("stamping allocates %v times per message, want 0", allocs)
	}
	if !NonceIs(NonceString(n), n) {
		t.Fatal("NonceIs")
	}
	if allocs := testing.AllocsPerRun(1000, func() { NonceIs("zz9", n) }); allocs != 0 {
		t.Fatalf("NonceIs allocates %v times, want 0", allocs)
	}
}

// BenchmarkStamp is the per-stream cost of sending a cached response: the
// nonce stamp and the codec's buffer slice, its one allocation (gRPC's own
// framing excluded).
func BenchmarkStamp(b *testing.B) {
	body := NewBody(make([]byte, 125_000))
	codec := NewCodec()
	st := NewStamper(5)
	m := new(Stamped) // the relay's writer reuses its batch of messages
	b.ReportAllocs()
	var n uint64
	for b.Loop() {
		n++
		*m = st.Stamp(body, n)
		out, err := codec.Marshal(m)
		if err != nil {
			b.Fatal(err)
		}
		out.Free()
	}
}
