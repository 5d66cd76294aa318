package upstream

import (
	"math/rand/v2"
	"time"
)

// DefaultResyncInterval is how often, on average, a class stream that
// stayed up is replaced by a new one (Config.Resync; upstream.resync_interval).
//
// A new stream reconciles what the class holds with what the upstream has:
// a delta stream claims every resource the class holds in its first
// request's initial_resource_versions, and the upstream answers what
// differs, removals included; a SotW stream asks every type at no version
// and gets each type's whole state, of which the class passes on only what
// changed. Clients are sent nothing when nothing differs.
//
// It bounds how long a fault of the upstream's bookkeeping is served. One
// is known in go-control-plane v0.14's delta server: a response its cache
// sends while the server handles a request is not in what that request's
// watch believes the stream holds, so a resource added and deleted around
// a request is never reported removed (docs/architecture.md, "Upstream
// behaviours the relay tolerates"; conformance chain/delta seed 15003309).
// Nothing in the protocol shows the relay it happened; a new stream mends
// it.
const DefaultResyncInterval = 15 * time.Minute

// resyncRestart ends a session that lived its resync interval: the class
// stream opens a new one at once (paced by RestartPace).
type resyncRestart struct{}

func (resyncRestart) Error() string {
	return "the resync interval passed: restarting the stream to reconcile the class with the upstream"
}

// resyncAfter is when a session started now resyncs: every spread
// uniformly over [3/4, 5/4) of itself, so class streams that started
// together (a relay's start, a control plane's return) do not all come
// back to the control plane at once. Zero for every <= 0: never.
func resyncAfter(every time.Duration) time.Duration {
	if every <= 0 {
		return 0
	}
	return max(1, every*3/4+rand.N(every/2+1)) // 1ns: a resync still, not never
}
