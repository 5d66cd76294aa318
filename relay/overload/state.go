package overload

import (
	"fmt"
	"time"
)

// State is the monitor's state; the order is the pressure's.
type State int32

const (
	// Normal: the heap is below the soft mark.
	Normal State = iota
	// Shedding: the heap reached the soft mark; what lingers is shed,
	// oldest first, at every sample while it stays there. Everything is
	// still admitted.
	Shedding
	// Refusing: the heap reached the refuse mark; new streams and new
	// subscriptions are refused (Refuse), streams already served keep
	// their updates.
	Refusing
	numStates
)

var stateNames = [numStates]string{"normal", "shedding", "refusing"}

func (s State) String() string {
	if s < 0 || s >= numStates {
		return fmt.Sprintf("state(%d)", int32(s))
	}
	return stateNames[s]
}

// Status is the monitor's state and counters, for the admin endpoints.
type Status struct {
	State string    `json:"state"`
	Since time.Time `json:"since"` // when it entered State
	// Heap is the last reading (the live heap at the last GC).
	HeapBytes   uint64 `json:"heap_bytes"`
	BudgetBytes uint64 `json:"budget_bytes"`
	// BudgetFrom says where the budget came from (see Detect).
	BudgetFrom  string `json:"budget_from"`
	ShedBytes   uint64 `json:"shed_mark_bytes"`
	RefuseBytes uint64 `json:"refuse_mark_bytes"`
	// What was shed and refused since the start.
	ShedClasses int64 `json:"shed_classes"`
	ShedShards  int64 `json:"shed_shards"`
	Refusals    int64 `json:"refusals"`
	// Samples counts the readings taken.
	Samples int64 `json:"samples"`
}

// BudgetKey is the configuration key of the budget, which a refusal names.
const BudgetKey = "overload.memory_budget_bytes"

// RefusedError is what Refuse returns while the monitor refuses.
type RefusedError struct {
	Heap, Mark, Budget uint64
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s: the relay's heap (%d bytes) is past its refuse mark (%d of a %d-byte budget); it keeps serving its streams but takes no new stream or subscription: try another relay",
		BudgetKey, e.Heap, e.Mark, e.Budget)
}
