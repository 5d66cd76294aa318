package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// startProxyClients starts n proxy clients of classes (round robin) on
// addr, a deltaShare of them speaking delta ADS (spread evenly), each from
// its own loopback source address; they run until ctx ends, in wg.
func startProxyClients(ctx context.Context, wg *sync.WaitGroup, n int, classes []string, deltaShare float64, addr string) []*ProxyClient {
	deps := newDepCache()
	out := make([]*ProxyClient, 0, n)
	for i := range n {
		// Client i is delta when the running count of deltaShare·(i+1)
		// steps up.
		delta := int(float64(i+1)*deltaShare) > int(float64(i)*deltaShare)
		c := newProxyClient(i, classes[i%len(classes)], delta, addr, loopbackSource(i), deps)
		out = append(out, c)
		wg.Go(func() { c.run(ctx) })
	}
	return out
}

// errNotConverged: clients still differ from the upstream at the deadline.
var errNotConverged = errors.New("clients not converged")

// awaitConvergence waits (timeout at most) until every client's state
// digest equals its class's expected one. It returns the time from since to
// the last client's last change, and each client's (0 for one whose state
// did not change after since).
func awaitConvergence(ctx context.Context, u *Upstream, clients []*ProxyClient, since time.Time, timeout time.Duration) (time.Duration, []time.Duration, error) {
	expected, err := u.Expected()
	if err != nil {
		return 0, nil, err
	}
	want := make(map[string]uint64, len(expected))
	for class, st := range expected {
		want[class] = st.Digest()
	}
	deadline := time.Now().Add(timeout)
	for {
		behind := 0
		for _, c := range clients {
			if c.digest.Load() != want[c.Class] {
				behind++
			}
		}
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("%w: %d of %d clients differ from the upstream after %v", errNotConverged, behind, len(clients), timeout)
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	each := make([]time.Duration, len(clients))
	for i, c := range clients {
		each[i] = max(0, time.Duration(c.changedAt.Load()-since.UnixNano()))
	}
	return slices.Max(each), each, nil
}

// countDrops returns the streams the clients did not end themselves, and
// logs why the first few ended.
func countDrops(clients []*ProxyClient, log func(string, ...any)) int64 {
	var n int64
	for _, c := range clients {
		d := c.drops.Load()
		if d > 0 && n < 5 {
			log("client %d (delta %v): %d streams ended by the relay; last: %v", c.ID, c.Delta, d, c.LastError())
		}
		n += d
	}
	return n
}
