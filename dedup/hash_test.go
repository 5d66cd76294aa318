package dedup

import (
	"fmt"
	"testing"
)

// sumOf is the SetSum of typeURL over pairs (name, hash, name, hash ...).
func sumOf(typeURL string, pairs ...any) uint64 {
	var s SetSum
	for i := 0; i < len(pairs); i += 2 {
		s.Add(pairs[i].(string), pairs[i+1].(uint64))
	}
	return s.Sum(typeURL)
}

func TestSetSum(t *testing.T) {
	base := sumOf("t", "a", uint64(1), "b", uint64(2))
	if got := sumOf("t", "b", uint64(2), "a", uint64(1)); got != base {
		t.Fatalf("the same set in another order hashed differently: %x vs %x", got, base)
	}
	var pending SetSum
	pending.Add("a", 1)
	pending.AddPending("b")
	cases := map[string]uint64{
		"other type":        sumOf("u", "a", uint64(1), "b", uint64(2)),
		"changed hash":      sumOf("t", "a", uint64(1), "b", uint64(3)),
		"renamed member":    sumOf("t", "a", uint64(1), "c", uint64(2)),
		"missing member":    sumOf("t", "a", uint64(1)),
		"extra member":      sumOf("t", "a", uint64(1), "b", uint64(2), "c", uint64(3)),
		"contents swapped":  sumOf("t", "a", uint64(2), "b", uint64(1)),
		"name boundary":     sumOf("t", "ab", uint64(1), "", uint64(2)),
		"empty":             sumOf("t"),
		"pending, not held": pending.Sum("t"),
	}
	for name, got := range cases {
		if got == base {
			t.Errorf("%s: hash collided with base", name)
		}
	}
}

// A sum kept as members come and go is the sum of the set it ends with,
// and every set along the way has its own.
func TestSetSumIncremental(t *testing.T) {
	held := map[string]uint64{}
	var inc SetSum
	seen := map[uint64]string{}
	rng := uint64(1)
	for step := range 2000 {
		rng = rng*6364136223846793005 + 1442695040888963407
		name := string(rune('a' + rng>>60)) // 16 names
		if h, ok := held[name]; ok {
			inc.Remove(name, h)
			delete(held, name)
		}
		if rng>>59&1 == 0 {
			h := rng >> 40 & 3 // four contents
			inc.Add(name, h)
			held[name] = h
		}
		var scratch SetSum
		for n, h := range held {
			scratch.Add(n, h)
		}
		if got, want := inc.Sum("t"), scratch.Sum("t"); got != want || inc.Len() != len(held) {
			t.Fatalf("step %d: kept sum %x (%d members), from scratch %x (%d)", step, got, inc.Len(), want, len(held))
		}
		key := fmt.Sprint(held)
		if other, ok := seen[inc.Sum("t")]; ok && other != key {
			t.Fatalf("step %d: sets %s and %s share a sum", step, other, key)
		}
		seen[inc.Sum("t")] = key
	}
}

func TestVersionFixedWidth(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xdeadbeef, ^uint64(0)} {
		if got := Version(v); len(got) != 16 {
			t.Errorf("Version(%x) = %q, want 16 hex digits", v, got)
		}
	}
	if Version(1) == Version(2) {
		t.Fatal("distinct sums share a version")
	}
}

func TestSignalCollapses(t *testing.T) {
	s := NewSignal()
	for i := 0; i < 10; i++ {
		s.Notify()
	}
	<-s.C()
	select {
	case <-s.C():
		t.Fatal("ten notifications produced more than one wake-up")
	default:
	}
}
