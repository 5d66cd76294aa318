package app

// dropCount is one reason's total, as /debug/drops and the status page show
// it (the same numbers as xds_relay_drops_total{reason}).
type dropCount struct {
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// dropCounts lists every drop reason with its total, in the fixed order of
// package drop (zeros included).
func (r *Relay) dropCounts() []dropCount {
	snap := r.drops.Snapshot()
	out := make([]dropCount, 0, len(snap))
	for _, c := range snap {
		out = append(out, dropCount{Reason: c.Reason.String(), Count: c.N})
	}
	return out
}
