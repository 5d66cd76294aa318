package upstream

import (
	"math/rand/v2"
	"time"
)

// Backoff is a capped exponential backoff with equal jitter: attempt n waits
// a uniformly random duration in [d/2, d], where d is Initial*2^n capped at
// Max. (Full jitter would draw from [0, d]; the floor of d/2 keeps a control
// plane that is still down from being retried at once.)
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
