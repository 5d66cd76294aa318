package overload

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/shard"
)

// Hysteresis is the part of the budget the heap must fall below a mark
// before the monitor leaves that mark's state: a relay hovering at a mark
// does not flap between admitting and refusing at every sample.
const Hysteresis = 0.05

// shedRounds bounds the shedding of one sample: each round sheds what
// lingered longer than half the oldest's age (the last, all that lingers),
// then collects garbage and reads the heap again.
const shedRounds = 5

// Shedder gives up what no client uses (*shard.Registry).
type Shedder interface {
	// OldestLingering is when the oldest lingering thing began to linger
	// (zero: nothing lingers).
	OldestLingering() time.Time
	// ShedLingering drops what began to linger before cutoff.
	ShedLingering(cutoff time.Time) shard.ShedCounts
}

var _ Shedder = (*shard.Registry)(nil)

// Config is a monitor's budget, marks and hooks.
type Config struct {
	// Budget is the memory budget in bytes (> 0); From says where it came
	// from, for the status (see Detect).
	Budget uint64
	From   string
	// ShedRatio and RefuseRatio are the marks, as parts of Budget
	// (0 < ShedRatio < RefuseRatio <= 1).
	ShedRatio, RefuseRatio float64
	// Interval is the time between samples (Run).
	Interval time.Duration
	// Shedder sheds lingering state above the soft mark (nil: nothing).
	Shedder Shedder
	// Read returns the heap in use (default LiveHeap); Collect runs a
	// garbage collection after a shed, so that Read sees what it freed
	// (default runtime.GC). Tests drive the marks through them.
	Read    func() uint64
	Collect func()
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log *zap.Logger
}

// Monitor samples the heap against the budget (Step, or Run at every
// Interval) and answers Refuse for the relay's admission points. Safe for
// concurrent use.
type Monitor struct {
	// Read-only after creation.
	cfg                      Config
	shedMark, refuseMark, hy uint64

	// Atomic: read by Refuse, Status, the metrics.
	state                         atomic.Int32
	heap                          atomic.Uint64
	shedClasses, shedShards, refs atomic.Int64
	samples                       atomic.Int64

	since atomic.Int64 // when the state was entered, Unix nanoseconds

	mu sync.Mutex // serialises Step
}

// New returns a monitor in state Normal; nothing runs until Run or Step.
func New(cfg Config) *Monitor {
	if cfg.Read == nil {
		cfg.Read = LiveHeap
	}
	if cfg.Collect == nil {
		cfg.Collect = runtime.GC
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	b := float64(cfg.Budget)
	m := &Monitor{cfg: cfg, shedMark: uint64(b * cfg.ShedRatio), refuseMark: uint64(b * cfg.RefuseRatio), hy: uint64(b * Hysteresis)}
	m.since.Store(cfg.Now().UnixNano())
	return m
}

// Run samples at every Interval until ctx ends (the caller's goroutine:
// the relay owns it and ends ctx when it closes).
func (m *Monitor) Run(ctx context.Context) {
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	for {
		m.Step()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Step takes one sample: at or above the soft mark it sheds lingering
// state, oldest first, until the heap is below the soft mark less the
// hysteresis or nothing lingers; then it sets the state from the heap.
func (m *Monitor) Step() {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer m.samples.Add(1) // last: a reader that sees it sees the state
	heap := m.cfg.Read()
	if heap >= m.shedMark {
		heap = m.shedLocked(heap)
	}
	m.heap.Store(heap)
	cur := State(m.state.Load())
	next := Normal
	switch {
	case heap >= m.refuseMark, cur == Refusing && heap+m.hy >= m.refuseMark:
		next = Refusing
	case heap >= m.shedMark, cur >= Shedding && heap+m.hy >= m.shedMark:
		next = Shedding
	}
	if next == cur {
		return
	}
	m.state.Store(int32(next))
	m.since.Store(m.cfg.Now().UnixNano())
	log := m.cfg.Log.Info
	if next == Refusing {
		log = m.cfg.Log.Warn
	}
	log("memory state changed", zap.Stringer("from", cur), zap.Stringer("to", next), zap.Uint64("heap_bytes", heap),
		zap.Uint64("budget_bytes", m.cfg.Budget), zap.Uint64("shed_mark_bytes", m.shedMark), zap.Uint64("refuse_mark_bytes", m.refuseMark))
}

// shedLocked sheds in rounds, oldest first, and returns the heap read
// after the last (mu held).
func (m *Monitor) shedLocked(heap uint64) uint64 {
	if m.cfg.Shedder == nil {
		return heap
	}
	before := heap
	var total shard.ShedCounts
	for round := 0; round < shedRounds && heap+m.hy >= m.shedMark; round++ {
		oldest := m.cfg.Shedder.OldestLingering()
		if oldest.IsZero() {
			break
		}
		now := m.cfg.Now()
		cutoff := now.Add(-now.Sub(oldest) / 2)
		if round == shedRounds-1 || !cutoff.After(oldest) {
			cutoff = now.Add(time.Nanosecond) // all that lingers
		}
		n := m.cfg.Shedder.ShedLingering(cutoff)
		if n.Classes+n.Shards == 0 {
			continue
		}
		total.Classes += n.Classes
		total.Shards += n.Shards
		m.cfg.Collect()
		heap = m.cfg.Read()
	}
	if total.Classes+total.Shards == 0 {
		return heap
	}
	m.shedClasses.Add(int64(total.Classes))
	m.shedShards.Add(int64(total.Shards))
	m.cfg.Log.Info("shed lingering state over the soft memory mark", zap.Int("classes", total.Classes), zap.Int("shards", total.Shards),
		zap.Uint64("heap_before_bytes", before), zap.Uint64("heap_after_bytes", heap), zap.Uint64("shed_mark_bytes", m.shedMark))
	return heap
}

// State is the state of the last sample.
func (m *Monitor) State() State { return State(m.state.Load()) }

// Refuse returns a *RefusedError while the monitor refuses (counted), nil
// otherwise; a nil monitor admits everything.
func (m *Monitor) Refuse() error {
	if m == nil || State(m.state.Load()) != Refusing {
		return nil
	}
	m.refs.Add(1)
	return &RefusedError{Heap: m.heap.Load(), Mark: m.refuseMark, Budget: m.cfg.Budget}
}

// Status returns the state, the marks and the counters.
func (m *Monitor) Status() Status {
	return Status{State: m.State().String(), Since: time.Unix(0, m.since.Load()), HeapBytes: m.heap.Load(), BudgetBytes: m.cfg.Budget, BudgetFrom: m.cfg.From,
		ShedBytes: m.shedMark, RefuseBytes: m.refuseMark,
		ShedClasses: m.shedClasses.Load(), ShedShards: m.shedShards.Load(), Refusals: m.refs.Load(), Samples: m.samples.Load()}
}
