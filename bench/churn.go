package bench

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Churn describes one change of a class's configuration.
type Churn struct {
	// Pattern: "one" (one resource changes), "fraction" (Fraction of the
	// resources change) or "all".
	Pattern  string
	Fraction float64
	// AddRemove is the probability that a change also adds an EDS cluster
	// (with its assignment) or removes one churn added, so deletions flow.
	AddRemove float64
}

// Validate reports an unknown pattern or a fraction out of range.
func (ch Churn) Validate() error {
	switch ch.Pattern {
	case "one", "all":
	case "fraction":
		if !(ch.Fraction > 0 && ch.Fraction <= 1) {
			return fmt.Errorf("churn fraction %v: want (0, 1]", ch.Fraction)
		}
	default:
		return fmt.Errorf("unknown churn pattern %q (want one, fraction or all)", ch.Pattern)
	}
	if ch.AddRemove < 0 || ch.AddRemove > 1 {
		return fmt.Errorf("churn add/remove probability %v: want [0, 1]", ch.AddRemove)
	}
	return nil
}

// resourceRef names one resource of a Config by its revision table.
type resourceRef struct {
	table map[int]int
	index int
}

// Step applies one change to cfg and bumps its generation. The change is a
// pure function of (class, generation, cfg's content and ch), so replaying
// the steps from generation 0 reproduces every generation.
func (ch Churn) Step(cfg *Config) {
	cfg.Generation++
	rng := rand.New(rand.NewPCG(xxhash.Sum64String(cfg.Class), uint64(cfg.Generation)))
	var pool []resourceRef
	for _, t := range []map[int]int{cfg.listeners, cfg.routes, cfg.clusters, cfg.endpoints} {
		for _, i := range slices.Sorted(maps.Keys(t)) {
			pool = append(pool, resourceRef{t, i})
		}
	}
	n := len(pool)
	switch ch.Pattern {
	case "one":
		n = 1
	case "fraction":
		n = max(1, int(ch.Fraction*float64(len(pool))+0.5))
	}
	for _, k := range rng.Perm(len(pool))[:n] {
		pool[k].table[pool[k].index]++
	}
	if rng.Float64() >= ch.AddRemove {
		return
	}
	var added []int
	for i := range cfg.clusters {
		if i >= cfg.Topo.Clusters {
			added = append(added, i)
		}
	}
	slices.Sort(added)
	if len(added) > 0 && (rng.IntN(2) == 0 || len(added) >= max(1, cfg.Topo.Clusters/5)) {
		i := added[rng.IntN(len(added))]
		delete(cfg.clusters, i)
		delete(cfg.endpoints, i)
		return
	}
	cfg.clusters[cfg.nextCluster], cfg.endpoints[cfg.nextCluster] = 0, 0
	cfg.nextCluster++
}

// Upstream is the control plane's state: one synthetic configuration per
// class, published to the control plane as a snapshot on every change.
type Upstream struct {
	CP *ControlPlane

	mu      sync.Mutex
	configs map[string]*Config // guarded by mu
	updates int                // guarded by mu: snapshots published
}

// NewUpstream publishes generation 0 of every class to cp.
func NewUpstream(cp *ControlPlane, classes []string, topo Topology) (*Upstream, error) {
	u := &Upstream{CP: cp, configs: map[string]*Config{}}
	for _, class := range classes {
		u.configs[class] = NewConfig(class, topo)
		if err := u.publish(class); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// startUpstream starts a go-control-plane (snapshot cache) and publishes
// generation 0 of topo to n node classes (className(k)), whose names it
// returns. Stop it with CP.Stop.
func startUpstream(n int, topo Topology) (*Upstream, []string, error) {
	cp, err := StartControlPlane("snapshot")
	if err != nil {
		return nil, nil, err
	}
	classes := make([]string, n)
	for k := range classes {
		classes[k] = className(k)
	}
	u, err := NewUpstream(cp, classes, topo)
	if err != nil {
		cp.Stop()
		return nil, nil, err
	}
	return u, classes, nil
}

// publish installs class's current configuration (mu held or not shared yet).
func (u *Upstream) publish(class string) error {
	cfg := u.configs[class]
	u.updates++
	return u.CP.SetSnapshot(class, cfg.Version(), cfg.Resources())
}

// Change applies ch to every class and publishes the new snapshots.
func (u *Upstream) Change(ch Churn) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, class := range slices.Sorted(maps.Keys(u.configs)) {
		ch.Step(u.configs[class])
		if err := u.publish(class); err != nil {
			return err
		}
	}
	return nil
}

// Expected returns each class's state as a proxy in sync holds it.
func (u *Upstream) Expected() (map[string]State, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string]State{}
	for class, cfg := range u.configs {
		s, err := ExpectedState(cfg)
		if err != nil {
			return nil, err
		}
		out[class] = s
	}
	return out, nil
}

// Updates returns the number of snapshots published.
func (u *Upstream) Updates() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.updates
}

// RunChurn applies ch at rate changes a second until ctx ends, each change
// under gate (whoever holds it keeps the configuration still). It returns
// the first error.
func RunChurn(ctx context.Context, u *Upstream, ch Churn, rate float64, gate sync.Locker) error {
	if rate <= 0 {
		<-ctx.Done()
		return nil
	}
	return every(ctx, perSecond(rate), func() error {
		gate.Lock()
		defer gate.Unlock()
		return u.Change(ch)
	})
}
