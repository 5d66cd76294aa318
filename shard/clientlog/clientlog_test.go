package clientlog

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
)

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 64, "short"},
		{strings.Repeat("a", 64), 64, strings.Repeat("a", 64)},
		{strings.Repeat("a", 1000), 32, strings.Repeat("a", 32-len("…(1000 bytes)")) + "…(1000 bytes)"},
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%d bytes, %d) = %q, want %q", len(tc.in), tc.n, got, tc.want)
		}
	}
	// Never more than n bytes, never a broken character.
	long := strings.Repeat("é", 1<<20)
	for n := 24; n < 48; n++ {
		got := Truncate(long, n)
		if len(got) > n || !utf8.ValidString(got) || !strings.HasSuffix(got, "(2097152 bytes)") {
			t.Errorf("Truncate(2 MB of é, %d) = %q (%d bytes)", n, got, len(got))
		}
	}
}

// Past its rate the gate refuses lines, and the next line let through says
// how many were dropped.
func TestGateRateAndSuppressedCount(t *testing.T) {
	now := time.Unix(1000, 0)
	g := NewGate(3, 64)
	g.now = func() time.Time { return now }
	allowed := 0
	for range 10 {
		if ok, _ := g.Allow(); ok {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("allowed %d of 10 lines in one second, want 3", allowed)
	}
	now = now.Add(time.Second)
	ok, f := g.Allow()
	if !ok || f.Key != "suppressed" || f.Integer != 7 {
		t.Fatalf("next second: allowed %v with %+v, want suppressed=7", ok, f)
	}
	if ok, f := g.Allow(); !ok || f != zap.Skip() {
		t.Fatalf("then: allowed %v with %+v, want nothing suppressed", ok, f)
	}
}

// The gate is a token bucket, not a counter reset every second: lines
// spent at the end of one second leave nothing to spend at the start of
// the next, so no interval of under a second lets through twice the rate.
func TestGateHasNoWindowEdge(t *testing.T) {
	const perSecond = 10
	start := time.Unix(1000, 0)
	now := start
	g := NewGate(perSecond, 64)
	g.now = func() time.Time { return now }
	allowedAt := func(at time.Time, tries int) int {
		now = at
		n := 0
		for range tries {
			if ok, _ := g.Allow(); ok {
				n++
			}
		}
		return n
	}
	// One line opens a window of a second for a per-second counter; then a
	// burst on either side of that window's end, 2 ms apart. A counter
	// reset each second lets 9 through before the edge and 10 after it.
	if got := allowedAt(start, 1); got != 1 {
		t.Fatalf("the first line was refused")
	}
	before := allowedAt(start.Add(999*time.Millisecond), 2*perSecond)
	after := allowedAt(start.Add(1001*time.Millisecond), 2*perSecond)
	if before+after > perSecond {
		t.Fatalf("%d lines, then %d more 2ms later across a second's edge: want no more than %d in all",
			before, after, perSecond)
	}
	if before == 0 {
		t.Fatalf("no line let through after an idle second")
	}
	// The bucket refills at the rate: one line per 1/perSecond.
	if got := allowedAt(now.Add(time.Second/perSecond), perSecond); got != 1 {
		t.Fatalf("a tenth of a second later %d lines were let through, want 1", got)
	}
	if got := allowedAt(now.Add(time.Second), 2*perSecond); got != perSecond {
		t.Fatalf("a second later %d lines were let through, want %d", got, perSecond)
	}
}
