package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// A run's timed update is repeated FanoutConfig.Rounds times, each from
// the state the previous one installed: round r installs version
// v(r+2) with one cluster changed from round r−1's state (cluster 0 gets
// its changed content in even rounds and its first content back in odd
// ones), so SotW clients receive the full state and delta clients one
// cluster every round. One round is a lottery for whatever the server
// does now and then, a garbage collection above all; the median of
// several is the update's usual cost.

// round is one timed update's measurement.
type round struct {
	lat, afterSent []time.Duration // each client's, sorted
	upstreamSent   time.Duration
	cpu            time.Duration
	cpCPU          time.Duration // the control plane's, where measured
	responseBytes  int           // one client's update response
	bytesTotal     int64         // delivered to all clients
}

// roundVersion is round r's version, roundChanged its changed cluster
// (-1: none, as in ControlPlane.SetClusters).
func roundVersion(r int) string { return fmt.Sprintf("v%d", r+2) }
func roundChanged(r int) int {
	if r%2 == 0 {
		return 0
	}
	return -1
}

// timedUpdate prepares round r (the server's work that is not serving, as
// the limit's encoding), then updates every class and measures until
// every client holds it. It returns the server's usage just before the
// update too. cp, when not nil, reads the control plane's usage
// (controlPlaneOf).
func timedUpdate(ctx context.Context, cfg FanoutConfig, srv target, cp func() (ProcUsage, error), receipts <-chan Receipt, r int) (round, ProcUsage, error) {
	version, changed := roundVersion(r), roundChanged(r)
	if err := srv.prepare(ctx, version, changed); err != nil {
		return round{}, ProcUsage{}, err
	}
	idle, err := srv.usage()
	if err != nil {
		return round{}, ProcUsage{}, err
	}
	var cpIdle ProcUsage
	if cp != nil {
		if cpIdle, err = cp(); err != nil {
			return round{}, ProcUsage{}, err
		}
	}
	cfg.Log("updating %d classes (%s)", cfg.Classes, version)
	start := time.Now()
	published, err := srv.set(ctx, version, changed)
	if err != nil {
		return round{}, ProcUsage{}, err
	}
	// One cluster changed: SotW clients get the full state again, delta
	// clients exactly the changed cluster.
	want := cfg.Clusters
	if cfg.Delta {
		want = 1
	}
	got, err := awaitPhase(cfg, receipts, version, want)
	if err != nil {
		return round{}, ProcUsage{}, fmt.Errorf("update %s: %w", version, err)
	}
	after, err := srv.usage()
	if err != nil {
		return round{}, ProcUsage{}, err
	}
	rd := round{cpu: after.CPU - idle.CPU, responseBytes: got[0].Bytes}
	if cp != nil {
		cpAfter, err := cp()
		if err != nil {
			return round{}, ProcUsage{}, err
		}
		rd.cpCPU = cpAfter.CPU - cpIdle.CPU
	}
	// Each class's sent instant: its upstream's Send, or the publication.
	sent := make([]time.Time, cfg.Classes)
	for k := range sent {
		at, ok, err := srv.sentAt(ctx, k, ClusterType, version)
		if err != nil {
			return round{}, ProcUsage{}, err
		}
		if !ok {
			at = published
		}
		sent[k] = at
		rd.upstreamSent = max(rd.upstreamSent, at.Sub(start))
	}
	rd.lat, rd.afterSent = make([]time.Duration, len(got)), make([]time.Duration, len(got))
	for i, rc := range got {
		rd.lat[i] = rc.At.Sub(start)
		rd.afterSent[i] = rc.At.Sub(sent[rc.Client%cfg.Classes])
		rd.bytesTotal += int64(rc.Bytes)
	}
	slices.Sort(rd.lat)
	slices.Sort(rd.afterSent)
	return rd, idle, nil
}

// medianOf is the median of f over the rounds (the lower of the middle
// two for an even count).
func medianOf(rounds []round, f func(round) time.Duration) time.Duration {
	v := make([]time.Duration, len(rounds))
	for i, r := range rounds {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// summarize sets res's time and CPU figures to the median over the rounds
// of each, its latency CDF and bytes to the first round's, and with more
// than one round, each round's CPU and time to the last client.
func summarize(res *FanoutResult, rounds []round) {
	first := func(n int) int { return 0 }
	p50 := func(n int) int { return n / 2 }
	p99 := func(n int) int { return n * 99 / 100 }
	last := func(n int) int { return n - 1 }
	lat := func(at func(int) int) func(round) time.Duration {
		return func(r round) time.Duration { return r.lat[at(len(r.lat))] }
	}
	afterSent := func(at func(int) int) func(round) time.Duration {
		return func(r round) time.Duration { return r.afterSent[at(len(r.afterSent))] }
	}
	res.First, res.P50, res.P99, res.Last = medianOf(rounds, lat(first)), medianOf(rounds, lat(p50)), medianOf(rounds, lat(p99)), medianOf(rounds, lat(last))
	res.AfterSentP50, res.AfterSentP99, res.AfterSentLast = medianOf(rounds, afterSent(p50)), medianOf(rounds, afterSent(p99)), medianOf(rounds, afterSent(last))
	res.ServerCPU = medianOf(rounds, func(r round) time.Duration { return r.cpu })
	if cp := res.ControlPlane; cp != nil {
		cp.UpdateCPU = medianOf(rounds, func(r round) time.Duration { return r.cpCPU })
		if len(rounds) > 1 {
			for _, r := range rounds {
				cp.RoundsCPU = append(cp.RoundsCPU, r.cpCPU)
			}
		}
	}
	res.UpstreamSent = medianOf(rounds, func(r round) time.Duration { return r.upstreamSent })
	res.Latencies, res.ResponseBytes, res.BytesTotal = rounds[0].lat, rounds[0].responseBytes, rounds[0].bytesTotal
	if len(rounds) > 1 {
		for _, r := range rounds {
			res.RoundsCPU = append(res.RoundsCPU, r.cpu)
			res.RoundsLast = append(res.RoundsLast, r.lat[len(r.lat)-1])
		}
	}
}
