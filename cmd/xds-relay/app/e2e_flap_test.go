package app_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// The control plane is killed right after each change — in the middle of
// pushing it — and comes back, five times: no client stream drops, and
// every client converges on the final state.
func TestE2EUpstreamFlapping(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	addr := m.Addr
	m.Set(t, "class-a", "v0", clusters("c0"))
	r := startRelay(t, addr)

	const n = 20
	type holder struct {
		c     *adsClient
		mu    sync.Mutex
		names []string
	}
	var holders []*holder
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		h := &holder{c: dialADS(t, ctx, r.Addr(), fmt.Sprintf("flap-%d", i), "class-a")}
		h.c.Subscribe(cdsType)
		holders = append(holders, h)
	}
	// Each client's responses are read by its own goroutine until the end.
	stop := make(chan struct{})
	for _, h := range holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				resp, err := h.c.next(50 * time.Millisecond)
				if err == nil {
					h.mu.Lock()
					h.names = clusterNamesOf(resp)
					h.mu.Unlock()
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	want := []string{"c0"}
	for round := 1; round <= 5; round++ {
		want = append(want, fmt.Sprintf("c%d", round))
		m.Set(t, "class-a", fmt.Sprintf("v%d", round), clusters(want...))
		m.Stop() // mid-push: the relay may or may not have the new snapshot
		m = startMgmt(t, addr)
		m.Set(t, "class-a", fmt.Sprintf("v%d", round), clusters(want...))
	}
	eventually(t, ctx, "every client to hold the final state", func() bool {
		for _, h := range holders {
			h.mu.Lock()
			ok := slices.Equal(h.names, want)
			h.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
	for i, h := range holders {
		if err := h.c.Err(); err != nil {
			t.Errorf("client %d's stream ended: %v", i, err)
		}
	}
	if got := r.Server().StreamCount(); got != n {
		t.Errorf("relay holds %d streams, want the original %d", got, n)
	}
}
