package relay

import (
	"sync"
	"time"
)

// rateLimiter allows at most burst events per period; it keeps per-client log
// lines (NACKs, bad requests) from flooding the log during a storm.
type rateLimiter struct {
	period time.Duration
	burst  int

	mu     sync.Mutex
	start  time.Time // guarded by mu
	events int       // guarded by mu
}

func newRateLimiter(period time.Duration, burst int) *rateLimiter {
	return &rateLimiter{period: period, burst: burst}
}

func (r *rateLimiter) allow() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if now.Sub(r.start) >= r.period {
		r.start, r.events = now, 0
	}
	r.events++
	return r.events <= r.burst
}
