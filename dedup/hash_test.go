package dedup

import "testing"

func TestSetHasherOrderAndContent(t *testing.T) {
	sum := func(typeURL string, pairs ...any) uint64 {
		h := NewSetHasher(typeURL)
		for i := 0; i < len(pairs); i += 2 {
			h.Add(pairs[i].(string), pairs[i+1].(uint64))
		}
		return h.Sum()
	}
	base := sum("t", "a", uint64(1), "b", uint64(2))
	if got := sum("t", "a", uint64(1), "b", uint64(2)); got != base {
		t.Fatalf("same input hashed differently: %x vs %x", got, base)
	}
	cases := map[string]uint64{
		"other type":     sum("u", "a", uint64(1), "b", uint64(2)),
		"changed hash":   sum("t", "a", uint64(1), "b", uint64(3)),
		"missing member": sum("t", "a", uint64(1)),
		"name boundary":  sum("t", "ab", uint64(1), "", uint64(2)),
	}
	for name, got := range cases {
		if got == base {
			t.Errorf("%s: hash collided with base", name)
		}
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
