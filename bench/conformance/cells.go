package conformance

import (
	"time"

	"github.com/xds-relay/xds-relay/shard"
)

// Cells is the matrix of upstreams, in the order the test runs them, each
// with the features it excludes by default and why.
func Cells() []Cell {
	return []Cell{
		// A SotW ADS-mode snapshot cache answers a named request only when it
		// names every resource of the type: the relay asks for the wildcard
		// (upstream.ask), as docs/architecture.md says to.
		{Name: "snapshot-ads/sotw", Upstream: UpSnapshotADS, AskWildcard: true},
		{Name: "snapshot-ads/delta", Upstream: UpSnapshotADS, Delta: true},
		{Name: "snapshot/sotw", Upstream: UpSnapshot},
		{Name: "snapshot/delta", Upstream: UpSnapshot, Delta: true},
		{Name: "linear/sotw", Upstream: UpLinear},
		{Name: "linear/delta", Upstream: UpLinear, Delta: true},
		{Name: "file", Upstream: UpFile},
		{Name: "chain/sotw", Upstream: UpChain},
		{Name: "chain/delta", Upstream: UpChain, Delta: true},
		// A control plane whose wildcard leaves names out (Envoy's
		// on-demand CDS asks them by name beside the wildcard); the relay
		// set upstream.wildcard: site_specific.
		{Name: "site/sotw", Upstream: UpSite},
		{Name: "site/delta", Upstream: UpSite, Delta: true},
	}
}

// CellByName returns the cell named name.
func CellByName(name string) (Cell, bool) {
	for _, c := range Cells() {
		if c.Name == name {
			return c, true
		}
	}
	return Cell{}, false
}

// genOptions are the generator's options for a cell; all includes the
// features the cell excludes by default.
func genOptions(c Cell, steps int, all bool, exclude []Feature) GenOptions {
	o := GenOptions{Steps: steps, Clients: 4, Exclude: map[Feature]bool{}, Restarts: c.canRestart()}
	if exclude != nil {
		for _, f := range exclude {
			o.Exclude[f] = true
		}
	} else if !all {
		for f := range c.Exclude {
			o.Exclude[f] = true
		}
	}
	return o
}

// Shrink drops steps from a diverging schedule while it still diverges,
// within budget: first every step after the diverging quiet point, then
// chunks of halving size (the final quiet point kept). Candidates run
// without the final hold unless the divergence showed during it, and with
// a quiet-point wait of PendingGrace + 1 s.
func Shrink(cell Cell, s Schedule, d *Divergence, o RunOptions, budget time.Duration, logf func(string, ...any)) Schedule {
	deadline := time.Now().Add(budget)
	cur := s
	cur.Steps = append([]Step(nil), s.Steps[:d.Step+1]...)
	if d.Step < len(s.Steps)-1 || !d.Hold {
		o.Hold = -1
	}
	if o.Wait == 0 {
		o.Wait = shard.PendingGrace + time.Second
	}
	for chunk := len(cur.Steps) / 2; chunk >= 1; chunk /= 2 {
		for i := 0; i+chunk < len(cur.Steps); {
			if time.Now().After(deadline) {
				logf("shrink: budget spent at %d steps", len(cur.Steps))
				return cur
			}
			cand := cur
			cand.Steps = append(append([]Step(nil), cur.Steps[:i]...), cur.Steps[i+chunk:]...)
			if IsDivergence(Run(cell, cand, o)) {
				cur = cand
				logf("shrink: %d steps", len(cur.Steps))
			} else {
				i += chunk
			}
		}
	}
	return cur
}
