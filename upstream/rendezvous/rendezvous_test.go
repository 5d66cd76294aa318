package rendezvous

import (
	"fmt"
	"slices"
	"testing"
)

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("class-%d", i)
	}
	return out
}

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:18000", i+1)
	}
	return out
}

func picks(ks, ms []string) map[string]string {
	out := map[string]string{}
	for _, k := range ks {
		out[k] = Pick(k, ms)
	}
	return out
}

// Every relay, whatever order it lists the members in, picks the same
// member for a key.
func TestPickIgnoresOrder(t *testing.T) {
	ms := members(5)
	rev := slices.Clone(ms)
	slices.Reverse(rev)
	rot := append(slices.Clone(ms[2:]), ms[:2]...)
	for _, k := range keys(1000) {
		want := Pick(k, ms)
		if got := Pick(k, rev); got != want {
			t.Fatalf("%s: reversed members pick %s, want %s", k, got, want)
		}
		if got := Pick(k, rot); got != want {
			t.Fatalf("%s: rotated members pick %s, want %s", k, got, want)
		}
	}
}

func TestPickEmptyAndOne(t *testing.T) {
	if got := Pick("class-a", nil); got != "" {
		t.Fatalf("no members: got %q, want \"\"", got)
	}
	if got := Pick("class-a", []string{"a:1"}); got != "a:1" {
		t.Fatalf("one member: got %q, want a:1", got)
	}
}

// Removing a member moves exactly its keys; every other key stays.
func TestRemovingAMemberMovesOnlyItsKeys(t *testing.T) {
	ks, ms := keys(6000), members(4)
	before := picks(ks, ms)
	gone := ms[1]
	after := picks(ks, slices.Delete(slices.Clone(ms), 1, 2))
	moved := 0
	for _, k := range ks {
		switch {
		case before[k] == gone && after[k] == gone:
			t.Fatalf("%s stayed on the removed member", k)
		case before[k] == gone:
			moved++
		case after[k] != before[k]:
			t.Fatalf("%s moved from %s to %s, though %s is still there", k, before[k], after[k], before[k])
		}
	}
	owned := 0
	for _, m := range before {
		if m == gone {
			owned++
		}
	}
	if moved != owned {
		t.Fatalf("%d keys moved, want the removed member's %d", moved, owned)
	}
}

// Adding a member to N moves keys only to it, about 1/(N+1) of them.
func TestAddingAMemberMovesAboutItsShare(t *testing.T) {
	const n, total = 3, 12000
	ks, ms := keys(total), members(n+1)
	before := picks(ks, ms[:n])
	after := picks(ks, ms)
	moved := 0
	for _, k := range ks {
		if after[k] == before[k] {
			continue
		}
		if after[k] != ms[n] {
			t.Fatalf("%s moved from %s to %s, not to the new member", k, before[k], after[k])
		}
		moved++
	}
	// The share is total/(n+1) = 3000; xxhash spreads 12,000 keys within a
	// few percent of it (the count is deterministic: the keys and members
	// are fixed).
	if want := total / (n + 1); moved < want*9/10 || moved > want*11/10 {
		t.Fatalf("%d of %d keys moved to the new member, want about %d", moved, total, want)
	}
}

// Each of N members gets about 1/N of the keys.
func TestPickSpreadsKeys(t *testing.T) {
	const n, total = 4, 12000
	count := map[string]int{}
	for _, m := range picks(keys(total), members(n)) {
		count[m]++
	}
	for _, m := range members(n) {
		if c, want := count[m], total/n; c < want*9/10 || c > want*11/10 {
			t.Fatalf("%s has %d of %d keys, want about %d (%v)", m, c, total, want, count)
		}
	}
}
