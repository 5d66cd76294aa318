package app

import (
	"math"
	"os"
	"runtime/debug"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/relay/overload"
)

// startOverload makes the memory monitor (nil when the relay has no
// budget) over the registry; serve runs it. A budget that did not come
// from GOMEMLIMIT also becomes the Go runtime's soft memory limit, while
// none is set, so the GC works harder before the relay sheds; Close puts
// the limit back.
func (r *Relay) startOverload() *overload.Monitor {
	cfg := r.cfg.Overload
	budget := overload.Detect(cfg.MemoryBudgetBytes, debug.SetMemoryLimit(-1), os.DirFS("/"))
	if budget.Bytes == 0 {
		r.log.Info("no memory ceiling", zap.String("budget_from", budget.From))
		return nil
	}
	if budget.From != overload.FromGoMemLimit && budget.Bytes <= math.MaxInt64 {
		limit := int64(budget.Bytes)
		if prev := debug.SetMemoryLimit(limit); prev != math.MaxInt64 {
			debug.SetMemoryLimit(prev) // set since (another relay of this process): keep it
		} else {
			r.stop.push(func() {
				if debug.SetMemoryLimit(-1) == limit {
					debug.SetMemoryLimit(math.MaxInt64)
				}
			})
		}
	}
	m := overload.New(overload.Config{Budget: budget.Bytes, From: budget.From, ShedRatio: cfg.ShedRatio, RefuseRatio: cfg.RefuseRatio,
		Interval: cfg.Interval, Shedder: r.registry, Read: r.heapRead, Log: r.log.Named("overload")})
	st := m.Status()
	r.log.Info("memory ceiling", zap.Uint64("budget_bytes", st.BudgetBytes), zap.String("budget_from", st.BudgetFrom),
		zap.Uint64("shed_mark_bytes", st.ShedBytes), zap.Uint64("refuse_mark_bytes", st.RefuseBytes))
	return m
}

// overloadStatus is the monitor's status; false when the relay has no
// memory ceiling.
func (r *Relay) overloadStatus() (overload.Status, bool) {
	if r.overload == nil {
		return overload.Status{}, false
	}
	return r.overload.Status(), true
}

// memoryCard fills the status page's memory card and, past a mark, its
// summary badge.
func (r *Relay) memoryCard(v *statusView) {
	st, ok := r.overloadStatus()
	if !ok {
		return
	}
	v.Memory, v.MemoryBudget, v.MemoryHeap = st.State, humanBytes(int(st.BudgetBytes)), humanBytes(int(st.HeapBytes))
	switch st.State {
	case overload.Refusing.String():
		v.MemoryBadge, v.Health, v.HealthText = "bad", "bad", "memory: refusing new clients"
	case overload.Shedding.String():
		v.MemoryBadge = "warn"
		if v.Health == "ok" {
			v.Health, v.HealthText = "warn", "memory: shedding"
		}
	default:
		v.MemoryBadge = "ok"
	}
}
