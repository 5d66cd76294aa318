package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/relay/overload"
)

// overloadStatus reads /debug/overload.
func overloadStatus(t *testing.T, ctx context.Context, r *app.Relay) overload.Status {
	t.Helper()
	var st overload.Status
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/overload", &st)
	return st
}

// waitOverload waits until a sample taken after the call finds the state
// want, and returns the status.
func waitOverload(t *testing.T, ctx context.Context, r *app.Relay, want overload.State) overload.Status {
	t.Helper()
	after := overloadStatus(t, ctx, r).Samples
	var st overload.Status
	eventually(t, ctx, "memory state "+want.String(), func() bool {
		st = overloadStatus(t, ctx, r)
		return st.Samples > after && st.State == want.String()
	})
	return st
}

const mib = 1 << 20

// budget configures a memory ceiling of bytes, sampled every 10ms.
func budget(bytes int) relayOption {
	return withConfig(func(c *app.Config) {
		c.Overload.MemoryBudgetBytes = bytes
		c.Overload.Interval = 10 * time.Millisecond
	})
}

// The memory ceiling against go-control-plane, the heap reading driven by
// the test: past the soft mark the class whose clients all left and the
// shard of an ended stream are shed, oldest first, while a new stream is
// still served; past the refuse mark a new stream is refused with
// RESOURCE_EXHAUSTED naming overload.memory_budget_bytes while the stream
// already served gets the control plane's update; below the marks a new
// stream is served again.
func TestE2EOverloadShedsRefusesAdmits(t *testing.T) {
	var heap atomic.Uint64
	f := startFixture(t, "keep", clusters("c1"), budget(1000*mib), withApp(app.WithHeapReader(heap.Load)))
	f.cp.Set(t, "gone", "v1", clusters("g1"))
	ctx, r := f.ctx, f.relay

	keeper := f.sotw(t, "keeper", "keep")
	keeper.Next(10 * time.Second)
	ended := dialADS(t, ctx, r.Addr(), "ended", "keep")
	ended.Subscribe(resource.ClusterType, "c1") // a shard of its own
	ended.Next(10 * time.Second)
	leaver := f.sotw(t, "leaver", "gone")
	leaver.Next(10 * time.Second)
	leaver.Close() // the class "gone" lingers, idle
	ended.Close()  // its shard lingers in "keep" (and so does the shard of "gone")
	eventually(t, ctx, "a lingering class and shard", func() bool {
		_, lingering := debugShard(t, r, "keep", resource.ClusterType, []string{"c1"})
		return lingering && len(r.Registry().Classes()) == 2 && r.Registry().Lookup("gone") != nil &&
			r.Registry().Lingers().Lingering == 2 && classIdle(t, ctx, r, "gone")
	})

	heap.Store(850 * mib) // past the soft mark (800 MiB): shed, still admitting
	st := waitOverload(t, ctx, r, overload.Shedding)
	if st.ShedClasses != 1 || st.ShedShards != 1 {
		t.Fatalf("shed %d classes and %d shards, want the idle class and the ended stream's shard", st.ShedClasses, st.ShedShards)
	}
	if r.Registry().Lookup("gone") != nil || r.Registry().Lingers().Lingering != 0 {
		t.Fatal("the idle class or the lingering shard is still held")
	}
	if _, held := debugShard(t, r, "keep", resource.ClusterType, nil); !held {
		t.Fatal("the keeper's shard was shed")
	}
	admitted := f.sotw(t, "admitted", "keep")
	admitted.Next(10 * time.Second)

	heap.Store(950 * mib) // past the refuse mark (900 MiB)
	waitOverload(t, ctx, r, overload.Refusing)
	waitNewStreamRefused(t, f, "refused")
	f.cp.Set(t, "keep", "v2", clusters("c1", "c2"))
	if got := clusterNames(t, keeper.Next(10*time.Second)); strings.Join(got, ",") != "c1,c2" {
		t.Fatalf("the served stream got %v, want the control plane's update [c1 c2]", got)
	}
	if v, ok := scrape(t, ctx, r, "xds_relay_overload_state"); !ok || v != 2 {
		t.Fatalf("xds_relay_overload_state = %v (%v), want 2", v, ok)
	}
	if v, ok := scrape(t, ctx, r, "xds_relay_overload_refusals_total"); !ok || v < 1 {
		t.Fatalf("xds_relay_overload_refusals_total = %v (%v), want at least 1", v, ok)
	}
	if page, _ := get(t, ctx, "http://"+r.AdminAddr()+"/"); !strings.Contains(string(page), `id="memory"><div class="n">refusing`) {
		t.Fatal("the status page does not show the memory ceiling refusing")
	}

	heap.Store(100 * mib)
	waitOverload(t, ctx, r, overload.Normal)
	again := f.sotw(t, "again", "keep")
	if got := clusterNames(t, again.Next(10*time.Second)); strings.Join(got, ",") != "c1,c2" {
		t.Fatalf("a new stream below the marks got %v, want [c1 c2]", got)
	}
}

// waitNewStreamRefused opens a stream of class keep and waits for it to
// be refused naming the budget's key. The relay refuses it before reading
// it: the send may find it closed already (io.EOF).
func waitNewStreamRefused(t *testing.T, f *fixture, id string) {
	t.Helper()
	c := dialADS(t, f.ctx, f.relay.Addr(), id, "keep")
	if err := c.SendSotW(resource.ClusterType, nil); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s: %v", id, err)
	}
	waitRefused(t, c, codes.ResourceExhausted, overload.BudgetKey)
}

// newStreamRefused opens a stream of class keep as node id and reports
// whether it was refused naming the budget (false: it was served).
func newStreamRefused(t *testing.T, f *fixture, id string) bool {
	t.Helper()
	c := dialADS(t, f.ctx, f.relay.Addr(), id, "keep")
	defer c.Close()
	if err := c.SendSotW(resource.ClusterType, nil); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s: %v", id, err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	served := func(c *xdstest.Client) bool { n, _ := c.Counts(resource.ClusterType); return n > 0 }
	if !c.WaitFor(ctx, func(c *xdstest.Client) bool { return c.Err() != nil || served(c) }) {
		t.Fatalf("%s: neither refused nor served", id)
	}
	if err := c.Err(); err != nil {
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), overload.BudgetKey) {
			t.Fatalf("%s: stream ended with %v, want RESOURCE_EXHAUSTED naming %s", id, err, overload.BudgetKey)
		}
		return true
	}
	return false
}

// classIdle reports whether /debug/classes shows class with no
// subscription.
func classIdle(t *testing.T, ctx context.Context, r *app.Relay, class string) bool {
	t.Helper()
	var classes []struct {
		Name    string `json:"name"`
		Streams int    `json:"subscriptions"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/classes", &classes)
	for _, c := range classes {
		if c.Name == class {
			return c.Streams == 0
		}
	}
	return false
}

// liveHeap is the live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	return overload.LiveHeap()
}

// settledHeap is the live heap once what earlier tests left running (relays
// closing, their goroutines ending) has settled: two readings 100 ms apart
// within 1 MiB of each other, or the last of 20.
func settledHeap() uint64 {
	prev := liveHeap()
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		cur := liveHeap()
		if max(cur, prev)-min(cur, prev) < 1<<20 {
			return cur
		}
		prev = cur
	}
	return prev
}

// The memory ceiling with a real budget and the real heap: SotW streams of
// tens of thousands of names each (every one its own class) push the
// relay's heap past a budget set a little above the heap before them; a
// new stream is then refused naming the key while a served stream gets
// the control plane's update. Once the big streams end, their lingering
// classes are shed and a new stream is served.
func TestE2EOverloadRealBudget(t *testing.T) {
	// The refuse mark's distance above the heap at the start: the big
	// classes must be most of what takes the heap past the marks, or
	// garbage of earlier tests collected meanwhile (the heap is the test
	// process's) can take it below the shed mark with nothing shed.
	const gap = 40 << 20
	base := settledHeap()
	limit := int((base + gap) * 10 / 9) // refuse mark 0.9: base + gap
	f := startFixture(t, "keep", clusters("c1"), budget(limit))
	ctx, r := f.ctx, f.relay
	keeper := f.sotw(t, "keeper", "keep")
	keeper.Next(10 * time.Second)

	var big []*adsClient
	for i := 0; ; i++ {
		if i == 40 {
			t.Fatalf("40 streams of 60000 names did not take the heap (%d) past the refuse mark of a %d-byte budget", overload.LiveHeap(), limit)
		}
		class := fmt.Sprintf("big-%d", i)
		c := dialADS(t, ctx, r.Addr(), class, class)
		if err := c.SendSotW(resource.EndpointType, edsNames(class, 60000)); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		eventually(t, ctx, "the big stream's shard, or its refusal", func() bool {
			return c.Err() != nil || r.Registry().Lookup(class) != nil && !classIdle(t, ctx, r, class)
		})
		if c.Err() != nil { // a sample of the GC's own found the heap past the mark already
			waitRefused(t, c, codes.ResourceExhausted, overload.BudgetKey)
			break
		}
		big = append(big, c)
		after := overloadStatus(t, ctx, r).Samples
		runtime.GC()
		var st overload.Status
		eventually(t, ctx, "a sample after the GC", func() bool { st = overloadStatus(t, ctx, r); return st.Samples > after+1 })
		if st.State != overload.Refusing.String() {
			continue
		}
		// The heap is the test process's: what else it frees meanwhile
		// may take it back under the mark (admission resumes), and then
		// one more big stream is needed.
		if newStreamRefused(t, f, fmt.Sprintf("refused-%d", i)) {
			t.Logf("refusing after %d streams: heap %d, refuse mark %d (base %d)", i+1, st.HeapBytes, st.RefuseBytes, base)
			break
		}
	}
	f.cp.Set(t, "keep", "v2", clusters("c1", "c2"))
	if got := clusterNames(t, keeper.Next(10*time.Second)); strings.Join(got, ",") != "c1,c2" {
		t.Fatalf("the served stream got %v, want the control plane's update [c1 c2]", got)
	}

	for _, c := range big {
		c.Close()
	}
	// The heap is the test process's: if the first reading after the
	// close is below the shed mark with nothing shed, what took it past the
	// marks was not (only) the big classes, and there is nothing to shed.
	// Otherwise the relay must shed them to get back to normal.
	after := overloadStatus(t, ctx, r).Samples
	runtime.GC()
	var first overload.Status
	eventually(t, ctx, "a sample after the close", func() bool { first = overloadStatus(t, ctx, r); return first.Samples > after+1 })
	if first.State == overload.Normal.String() && first.ShedClasses == 0 {
		t.Logf("the heap (%d) fell under the shed mark (%d) by itself once the streams closed: nothing to shed", first.HeapBytes, first.ShedBytes)
	} else if st := waitOverload(t, ctx, r, overload.Normal); st.ShedClasses < int64(len(big)) {
		t.Fatalf("shed %d classes, want the %d big ones", st.ShedClasses, len(big))
	}
	again := f.sotw(t, "again", "keep")
	if got := clusterNames(t, again.Next(10*time.Second)); strings.Join(got, ",") != "c1,c2" {
		t.Fatalf("a new stream after the shed got %v, want [c1 c2]", got)
	}
}

// A budget from the configuration becomes the Go runtime's soft memory
// limit while the relay runs (GOMEMLIMIT unset), and the limit is put
// back when it closes.
func TestOverloadBudgetSetsGoMemoryLimit(t *testing.T) {
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Skip("GOMEMLIMIT is set: the relay takes it as its budget and sets nothing")
	}
	r := startRelay(t, "", sampleSource(), budget(64*mib))
	if got := debug.SetMemoryLimit(-1); got != 64*mib {
		t.Fatalf("soft memory limit %d while the relay runs, want the budget %d", got, 64*mib)
	}
	if st := overloadStatus(t, testContext(t), r); st.BudgetBytes != 64*mib || st.BudgetFrom != overload.FromConfig {
		t.Fatalf("status %+v, want a 64 MiB budget from config", st)
	}
	r.Close()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("soft memory limit %d after Close, want none", got)
	}
}
