package drop

import (
	"sync"
	"testing"
)

func TestEveryReasonHasAName(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range All() {
		name := r.String()
		if name == "" || name == "unknown" {
			t.Errorf("reason %d has no name", r)
		}
		if seen[name] {
			t.Errorf("name %q used twice", name)
		}
		seen[name] = true
	}
	if Reason(0).String() != "unknown" || numReasons.String() != "unknown" {
		t.Error("out-of-range reasons must read unknown")
	}
}

func TestCountersConcurrent(t *testing.T) {
	var c Counters
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				c.Add(Superseded)
			}
			c.AddN(Collapsed, 3)
		}()
	}
	wg.Wait()
	got := map[Reason]uint64{}
	for _, n := range c.Snapshot() {
		got[n.Reason] = n.N
	}
	if got[Superseded] != 8000 || got[Collapsed] != 24 || got[StaleNonce] != 0 {
		t.Fatalf("got %v", got)
	}
	if len(c.Snapshot()) != len(All()) {
		t.Fatal("snapshot must list every reason")
	}
}

func TestNilCountersCountNothing(t *testing.T) {
	var c *Counters
	c.Add(Superseded) // must not panic
	for _, n := range c.Snapshot() {
		if n.N != 0 {
			t.Fatalf("nil counters hold %v", n)
		}
	}
}

func TestAddAllocatesNothing(t *testing.T) {
	var c Counters
	if a := testing.AllocsPerRun(100, func() { c.Add(AlreadyHeld) }); a != 0 {
		t.Fatalf("Add allocates %v times", a)
	}
}

func BenchmarkAdd(b *testing.B) {
	var c Counters
	for b.Loop() {
		c.Add(Superseded)
	}
}
