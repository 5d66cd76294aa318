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
