package upstream

import (
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with equal jitter: attempt n's
// base is d = Initial*2^n, capped at Max, and it waits d/2 plus a uniformly
// random duration in [0, d/2], so always at least half the base (full
// jitter would draw from [0, d]).
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// DefaultBackoff is used when the configuration leaves backoff unset.
var DefaultBackoff = Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}

// Delay returns the wait before attempt n (0 is the first retry).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	half := d / 2
	return half + rand.N(half+1)
}
