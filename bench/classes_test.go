package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// Every target serves each class the workload's state: with --overlap 0.6
// of 10 clusters, exactly 6 of each class's resources are byte-identical in
// every class and the other 4 are the class's own, as clients receive them.
func TestOverlapShareAsReceived(t *testing.T) {
	const classes, clusters, unique = 3, 10, 0.4
	relay, benchBin := binaries(t)
	w := Workload{Classes: classes, Clusters: clusters, Overlap: 1 - unique}
	if w.Shared() != 6 {
		t.Fatalf("Shared() = %d, want 6", w.Shared())
	}
	want := make([][]uint64, classes)
	for k := range want {
		for i := range clusters {
			b, err := marshalAny(w.Cluster(k, i, false))
			if err != nil {
				t.Fatal(err)
			}
			want[k] = append(want[k], ContentHash(b))
		}
		slices.Sort(want[k])
	}
	for _, target := range []string{TargetRelay, TargetLimit, TargetDirect} {
		t.Run(target, func(t *testing.T) {
			var serverLog xdstest.SyncBuffer
			cfg := FanoutConfig{Target: target, RelayBin: relay, BenchBin: benchBin, Clients: classes, Classes: classes,
				Clusters: clusters, Unique: unique, Timeout: 30 * time.Second, ServerStderr: &serverLog}
			if err := cfg.fillDefaults(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv, err := startTarget(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.stop()
			if _, err := srv.set(ctx, "v1", -1); err != nil {
				t.Fatal(err)
			}
			out := make(chan Receipt, classes)
			ids, names := []int{0, 1, 2}, []string{className(0), className(1), className(2)}
			c, err := Dial(ctx, srv.listenAddr(), nil, ClientOptions{HashResources: true}, ids, names, out)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); c.Close() }()
			got, err := await(out, classes, "v1", clusters, 30*time.Second, func(int) {})
			if err != nil {
				t.Fatalf("%v\nserver log:\n%s", err, serverLog.String())
			}
			inClasses := map[uint64]int{}
			for _, r := range got {
				h := slices.Sorted(slices.Values(r.Hashes))
				if !slices.Equal(h, want[r.Client]) {
					t.Errorf("class %d received other resources than the workload's", r.Client)
				}
				for _, x := range slices.Compact(h) {
					inClasses[x]++
				}
			}
			shared := 0
			for _, n := range inClasses {
				if n == classes {
					shared++
				} else if n != 1 {
					t.Errorf("a resource is in %d of %d classes: want all or one", n, classes)
				}
			}
			if shared != 6 || len(inClasses) != 6+classes*4 {
				t.Errorf("%d resources in every class, %d distinct: want 6 and %d", shared, len(inClasses), 6+classes*4)
			}
		})
	}
}

// StateBytes counts the shared clusters once among the distinct ones.
func TestWorkloadStateBytes(t *testing.T) {
	all, uniq, err := Workload{Classes: 4, Clusters: 10, Overlap: 1}.StateBytes()
	if err != nil {
		t.Fatal(err)
	}
	if all != 4*uniq {
		t.Errorf("overlap 1: all %d, unique %d: want all = 4 × unique", all, uniq)
	}
	all0, uniq0, err := Workload{Classes: 4, Clusters: 10, Overlap: 0}.StateBytes()
	if err != nil {
		t.Fatal(err)
	}
	if all0 != uniq0 {
		t.Errorf("overlap 0: all %d, unique %d: want them equal", all0, uniq0)
	}
}

// Padding grows every cluster by about its bytes and keeps the overlap: a
// shared cluster is still byte-identical across classes.
func TestWorkloadPadding(t *testing.T) {
	const pad = 1000
	plain := Workload{Classes: 2, Clusters: 4, Overlap: 0.5}
	padded := plain
	padded.Padding = pad
	_, uniqPlain, err := plain.StateBytes()
	if err != nil {
		t.Fatal(err)
	}
	allPadded, uniqPadded, err := padded.StateBytes()
	if err != nil {
		t.Fatal(err)
	}
	distinct := int64(plain.Shared() + (plain.Clusters-plain.Shared())*plain.Classes)
	if grown := (uniqPadded - uniqPlain) / distinct; grown < pad || grown > pad+64 { // 64: the metadata's keys and framing
		t.Errorf("padding %d grew each distinct cluster by %d bytes", pad, grown)
	}
	if allPadded >= int64(plain.Classes)*uniqPadded {
		t.Errorf("padded: all %d, unique %d: the shared clusters are no longer counted once", allPadded, uniqPadded)
	}
	a, err := marshalAny(padded.Cluster(0, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	b, err := marshalAny(padded.Cluster(1, 0, false))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("a shared padded cluster differs between classes")
	}
}

// A churn run accounts for every update: each (update, client of its
// class) pair is a receipt or superseded by a later update of the class,
// every client ends with its class's last update, and the latency
// percentiles are ordered. Through the relay every update's sent instant is
// the control plane's own; the other targets are their own senders.
func TestChurnAccountsForEveryUpdate(t *testing.T) {
	const clients, classes, rate = 6, 2, 40
	relay, benchBin := binaries(t)
	// relay+child: the relay's control plane a process of its own, which
	// tells the bench when it sent each update ("sent").
	for _, name := range []string{TargetRelay, TargetLimit, TargetDirect, TargetRelay + "+child"} {
		t.Run(name, func(t *testing.T) {
			target, child := strings.CutSuffix(name, "+child")
			var serverLog xdstest.SyncBuffer
			res, err := RunFanout(context.Background(), FanoutConfig{
				Target: target, RelayBin: relay, BenchBin: benchBin, Clients: clients, Classes: classes, Clusters: 5,
				Unique: 0.5, Churn: rate, ChurnDuration: time.Second, Timeout: 30 * time.Second, Log: t.Logf, ServerStderr: &serverLog,
				ControlPlaneChild: child,
			})
			if err != nil {
				t.Fatalf("%v\nserver log:\n%s", err, serverLog.String())
			}
			c := res.Churn
			if c == nil {
				t.Fatal("no churn result")
			}
			// One update per 1/rate of the duration, however slow the run.
			if c.Updates != rate {
				t.Errorf("%d updates, want %d", c.Updates, rate)
			}
			if c.Expected != rate*clients/classes || c.Receipts+c.Superseded != c.Expected || c.Receipts < c.Updates {
				t.Errorf("expected %d, receipts %d, superseded %d: want %d = receipts + superseded, receipts ≥ updates",
					c.Expected, c.Receipts, c.Superseded, rate*clients/classes)
			}
			for _, q := range [][]time.Duration{{c.P50, c.P90, c.P99, c.Max}, {c.AfterSentP50, c.AfterSentP90, c.AfterSentP99, c.AfterSentMax}} {
				if q[0] <= 0 || !slices.IsSorted(q) {
					t.Errorf("percentiles p50, p90, p99, max = %v: want positive and ordered", q)
				}
			}
			wantTimed := 0
			if target == TargetRelay {
				wantTimed = c.Updates
			}
			if c.SentTimed != wantTimed {
				t.Errorf("%d updates timed at the upstream's send, want %d", c.SentTimed, wantTimed)
			}
			if c.ServerCPU <= 0 || c.ServerRSS <= 0 {
				t.Errorf("server not measured: CPU %v, RSS %d", c.ServerCPU, c.ServerRSS)
			}
		})
	}
}

// The fan-out result takes the upstream's own sending out: through the
// relay each class's instant is go-control-plane's Send of v2 to it, so a
// client's time after it is below its raw time.
func TestFanoutUpstreamSent(t *testing.T) {
	relay, benchBin := binaries(t)
	for _, target := range []string{TargetRelay, TargetLimit, TargetRelay + "+child"} {
		name, child := strings.CutSuffix(target, "+child")
		res, err := RunFanout(context.Background(), FanoutConfig{
			Target: name, RelayBin: relay, BenchBin: benchBin, Clients: 8, Classes: 4, Clusters: 20,
			Timeout: 30 * time.Second, Log: t.Logf, ControlPlaneChild: child,
		})
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if res.UpstreamSent <= 0 || res.AfterSentLast <= 0 || res.AfterSentLast >= res.Last || res.AfterSentP50 > res.AfterSentP99 {
			t.Errorf("%s: upstream sent %v, after sent p50 %v p99 %v last %v, raw last %v: want 0 < after sent < raw",
				target, res.UpstreamSent, res.AfterSentP50, res.AfterSentP99, res.AfterSentLast, res.Last)
		}
	}
}
