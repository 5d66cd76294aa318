package app

import "math"

// minMemoryBudget is the least overload.memory_budget_bytes: below it a
// relay is past its marks at rest (and the Go runtime's soft limit, set to
// the budget, would keep the GC running), as a budget written in MB rather
// than bytes would be.
const minMemoryBudget = 16 << 20

// validateOverload checks the memory ceiling's marks: 0 < shed_ratio <
// refuse_ratio <= 1 (defaults applied; negatives are reported already).
func (c *Config) validateOverload(bad func(key, format string, args ...any)) {
	o := c.Overload
	if 0 < o.MemoryBudgetBytes && o.MemoryBudgetBytes < minMemoryBudget {
		bad("overload.memory_budget_bytes", "must be at least %d (16 MiB) bytes, got %d (-1: no ceiling)", minMemoryBudget, o.MemoryBudgetBytes)
	}
	if math.IsNaN(o.ShedRatio) || o.ShedRatio >= 1 {
		bad("overload.shed_ratio", "must be a part of the budget below 1, got %v", o.ShedRatio)
	}
	if !(o.RefuseRatio <= 1) {
		bad("overload.refuse_ratio", "must be a part of the budget up to 1, got %v", o.RefuseRatio)
	} else if o.ShedRatio > 0 && o.RefuseRatio <= o.ShedRatio {
		bad("overload.refuse_ratio", "must be above overload.shed_ratio (%v), got %v", o.ShedRatio, o.RefuseRatio)
	}
}
