package overload

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/shard"
)

// fakeHeap is a heap of base bytes plus what lingers: each lingering thing
// has an age and a size, and shedding it frees its size at once.
type fakeHeap struct {
	now     time.Time
	base    uint64
	items   []item
	shedAll []time.Time // the cutoffs asked
}

type item struct {
	since time.Time
	size  uint64
	class bool
}

func (h *fakeHeap) read() uint64 {
	n := h.base
	for _, it := range h.items {
		n += it.size
	}
	return n
}

func (h *fakeHeap) OldestLingering() time.Time {
	var oldest time.Time
	for _, it := range h.items {
		if oldest.IsZero() || it.since.Before(oldest) {
			oldest = it.since
		}
	}
	return oldest
}

func (h *fakeHeap) ShedLingering(cutoff time.Time) shard.ShedCounts {
	h.shedAll = append(h.shedAll, cutoff)
	var n shard.ShedCounts
	kept := h.items[:0]
	for _, it := range h.items {
		switch {
		case !it.since.Before(cutoff):
			kept = append(kept, it)
		case it.class:
			n.Classes++
		default:
			n.Shards++
		}
	}
	h.items = kept
	return n
}

// monitor is a monitor of a 1000-byte budget, marks at 800 and 900, over h.
func monitor(h *fakeHeap) *Monitor {
	return New(Config{Budget: 1000, From: FromConfig, ShedRatio: 0.8, RefuseRatio: 0.9, Interval: time.Hour, Shedder: h,
		Read: h.read, Collect: func() {}, Now: func() time.Time { return h.now }})
}

// Over the soft mark the monitor sheds what lingers, oldest first, and only
// as much as brings the heap below the mark less the hysteresis: a heap
// past even the refuse mark that shedding brings down refuses nothing.
func TestSoftMarkShedsOldestFirst(t *testing.T) {
	now := time.Unix(1000, 0)
	h := &fakeHeap{now: now, base: 640, items: []item{
		{since: now.Add(-40 * time.Minute), size: 100, class: true},
		{since: now.Add(-30 * time.Minute), size: 100},
		{since: now.Add(-10 * time.Minute), size: 100},
	}}
	m := monitor(h) // heap 940: past the refuse mark
	m.Step()
	if got := h.read(); got != 740 {
		t.Fatalf("heap %d after the shed, want 740 (the two oldest shed)", got)
	}
	if len(h.items) != 1 || !h.items[0].since.Equal(now.Add(-10*time.Minute)) {
		t.Fatalf("left %+v, want the youngest only", h.items)
	}
	if st := m.Status(); st.State != "normal" || st.ShedClasses != 1 || st.ShedShards != 1 || st.HeapBytes != 740 {
		t.Fatalf("status %+v, want normal, 1 class and 1 shard shed, heap 740", st)
	}
	if err := m.Refuse(); err != nil {
		t.Fatalf("Refuse = %v after shedding brought the heap down, want nil", err)
	}

	// Over the mark again: the rest is shed; then, with nothing left to
	// shed, the soft mark holds the state at shedding, still admitting.
	h.base = 760 // 860 with the last item
	m.Step()
	if st := m.Status(); st.State != "normal" || len(h.items) != 0 || st.HeapBytes != 760 {
		t.Fatalf("status %+v, items %v: want the last item shed and normal at 760 (below 800)", st, h.items)
	}
	h.base = 820
	m.Step()
	if st := m.State(); st != Shedding || m.Refuse() != nil {
		t.Fatalf("state %v at 820 with nothing to shed, want shedding, admitting", st)
	}
}

// Past the refuse mark the monitor refuses, naming the key, until the heap
// is below the mark less the hysteresis; then it admits again (and leaves
// shedding only below the soft mark less the hysteresis).
func TestRefuseMarkRefusesThenResumes(t *testing.T) {
	h := &fakeHeap{now: time.Unix(1000, 0)}
	m := monitor(h)
	for _, step := range []struct {
		heap uint64
		want State
	}{
		{700, Normal}, {900, Refusing}, {851, Refusing}, {849, Shedding}, {760, Shedding}, {749, Normal}, {899, Shedding}, {950, Refusing}, {10, Normal},
	} {
		h.base = step.heap
		m.Step()
		if got := m.State(); got != step.want {
			t.Fatalf("heap %d: state %v, want %v", step.heap, got, step.want)
		}
		err := m.Refuse()
		var re *RefusedError
		switch {
		case step.want == Refusing && (!errors.As(err, &re) || !strings.Contains(err.Error(), BudgetKey) || re.Heap != step.heap):
			t.Fatalf("heap %d: Refuse = %v, want a RefusedError naming %s at heap %d", step.heap, err, BudgetKey, step.heap)
		case step.want != Refusing && err != nil:
			t.Fatalf("heap %d: Refuse = %v, want nil", step.heap, err)
		}
	}
	if st := m.Status(); st.Refusals != 3 || st.RefuseBytes != 900 || st.ShedBytes != 800 {
		t.Fatalf("status %+v, want 3 refusals, marks 800 and 900", st)
	}
	var nilMonitor *Monitor
	if err := nilMonitor.Refuse(); err != nil {
		t.Fatalf("a nil monitor refused: %v", err)
	}
}

// Run samples until its context ends, and returns.
func TestRunStopsWithContext(t *testing.T) {
	h := &fakeHeap{now: time.Unix(1000, 0), base: 950}
	m := monitor(h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	cancel()
	<-done
	if m.State() != Refusing {
		t.Fatalf("state %v, want the first sample taken (refusing)", m.State())
	}
}
