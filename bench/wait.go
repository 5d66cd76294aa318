package bench

import (
	"context"
	"time"
)

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// every calls f once a period until ctx ends (nil) or f fails (its error).
// A call that outlasts the period delays the next; ticks are not queued.
func every(ctx context.Context, period time.Duration, f func() error) error {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := f(); err != nil {
			return err
		}
	}
}

// perSecond is the period of rate events a second.
func perSecond(rate float64) time.Duration { return time.Duration(float64(time.Second) / rate) }
