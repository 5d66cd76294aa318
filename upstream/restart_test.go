package upstream

import (
	"context"
	"testing"
	"time"
)

// Restarts the relay chooses are paced: the first at once, the next no
// sooner than RestartPace after the one before, however fast subscription
// changes (which clients control) ask for them.
func TestRestartWait(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name string
		last time.Time
		want time.Duration
	}{
		{"first", time.Time{}, 0},
		{"right after", now, RestartPace},
		{"half way", now.Add(-RestartPace / 2), RestartPace / 2},
		{"long after", now.Add(-time.Hour), 0},
	} {
		if got := restartWait(c.last, now); got != c.want {
			t.Errorf("%s: wait %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSleepCtxEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if sleepCtx(ctx, time.Hour) {
		t.Fatal("a cancelled context let a one-hour sleep pass")
	}
	if sleepCtx(ctx, 0) {
		t.Fatal("no wait on a cancelled context reported success")
	}
	if !sleepCtx(context.Background(), 0) {
		t.Fatal("no wait on a live context failed")
	}
}
