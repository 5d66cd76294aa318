package conformance

import (
	"time"

	"github.com/xds-relay/xds-relay/shard"
)

// The reasons cells exclude features by default: divergences found and
// not fixed yet (docs/conformance.md; shrunk schedules under testdata).
const (
	whyADSMode = "issue 11 item 1, go-control-plane ADS-mode variant: the snapshot cache in ADS mode answers a named " +
		"request only when it names every resource of the type and never understands \"*\", so only the legacy wildcard is answered"
	whyMixSotW = "issue 11 items 1 and 2: [\"*\", names] and [\"*\"] after names are answered by go-control-plane's " +
		"snapshot cache with the named resources or nothing, which the relay serves as the wildcard's state"
	whyMixLinear = "issue 11 item 2, linear-cache variant: a wildcard asked after names waits for an answer the linear cache " +
		"never sends (nothing changed), so the wildcard client gets nothing"
	whyMixDelta = "issue 11 item 2, delta-upstream variant: +[*] after names is answered by go-control-plane with nothing " +
		"for what the stream already holds, and the relay's wildcard shard waits for it"
	whyShrinkDelta = "issue 11 item 3: go-control-plane's delta server does not resend what it believes a stream holds " +
		"when the relay unsubscribes and subscribes again (a class emptied and rejoined, a client leaving or reconnecting)"
)

// whyRestart: a SotW upstream stream that reconnects with its last
// version is not told of a deletion it missed (before the restart or while
// reconnecting) when nothing is left to send.
const whyRestart = "new: go-control-plane (snapshot and linear) does not send a SotW stream that reconnects with version_info " +
	"the empty state left by a deletion it missed, so the relay keeps serving the deleted Listener or Cluster"

// whyFileStale: the file source may serve a class's newly subscribed type
// at an older generation.
const whyFileStale = "new: the file source served a RouteConfiguration at a generation older than it had loaded to a class " +
	"that subscribed to the type late; with a deletion following, a SotW client keeps it"

// whyEmptyName is why every cell excludes FEmptyName.
const whyEmptyName = "issue 11 item 4: a request naming \"\" ends the whole stream with INVALID_ARGUMENT"

// Cells is the matrix of upstreams, in the order the test runs them, each
// with the features it excludes by default and why.
func Cells() []Cell {
	adsMode := map[Feature]string{FStar: whyADSMode, FNames: whyADSMode, FStarNames: whyADSMode, FNone: whyADSMode,
		FEmptyName: whyEmptyName, FRestart: whyRestart}
	sotwMix := map[Feature]string{FMix: whyMixSotW, FEmptyName: whyEmptyName, FRestart: whyRestart}
	delta := map[Feature]string{FMix: whyMixDelta, FShrink: whyShrinkDelta, FEmptyName: whyEmptyName}
	return []Cell{
		{Name: "snapshot-ads/sotw", Upstream: UpSnapshotADS, Exclude: adsMode},
		{Name: "snapshot-ads/delta", Upstream: UpSnapshotADS, Delta: true, Exclude: delta},
		{Name: "snapshot/sotw", Upstream: UpSnapshot, Exclude: sotwMix},
		{Name: "snapshot/delta", Upstream: UpSnapshot, Delta: true, Exclude: delta},
		{Name: "linear/sotw", Upstream: UpLinear, Exclude: map[Feature]string{FMix: whyMixLinear, FEmptyName: whyEmptyName, FRestart: whyRestart}},
		{Name: "linear/delta", Upstream: UpLinear, Delta: true, Exclude: delta},
		{Name: "file", Upstream: UpFile, Exclude: map[Feature]string{FEmptyName: whyEmptyName, FDelete: whyFileStale}},
		{Name: "chain/sotw", Upstream: UpChain, Exclude: sotwMix},
		{Name: "chain/delta", Upstream: UpChain, Delta: true, Exclude: delta},
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
