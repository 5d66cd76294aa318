package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// SlowConfig describes a slow-client measurement: Clients proxy clients
// that keep up and Stalled ones that never read, while changes flow.
type SlowConfig struct {
	RelayBin   string
	ConfigFile string // the relay's --config (e.g. limits.max_collapses)
	Clients    int
	Stalled    int
	Classes    int
	DeltaShare float64
	Topology   Topology
	Churn      Churn
	Rate       float64       // changes a second (each to every class), at most as fast as the clients converge
	Duration   time.Duration // of the changes
	// UntilStalledGone goes on changing past Duration, for at most Timeout
	// more, until the relay has disconnected every stalled client: a run
	// whose outcome does not depend on how many changes a busy machine
	// fits into Duration.
	UntilStalledGone bool
	Idle             time.Duration // measured before and after the changes
	Timeout          time.Duration // bound of each wait
	Log              func(format string, args ...any)
	// RelayStderr receives the relay's log (nil: this process's stderr).
	RelayStderr io.Writer
}

// RSSSample is the relay's resident memory at a time since the changes began.
type RSSSample struct {
	At  time.Duration `json:"at_ns"`
	RSS int64         `json:"rss_bytes"`
}

// SlowResult is what a slow-client run measured.
type SlowResult struct {
	Clients, Stalled int
	Changes          int
	NotConverged     int // changes the clients did not all take within Timeout
	// Latencies: for every change and client, upstream change → the client
	// holding the new state; sorted.
	Latencies           []time.Duration `json:"latencies_ns"`
	RSSBefore, RSSPeak  int64
	RSSAfter            int64
	RSS                 []RSSSample
	StalledDisconnected int     // stalled clients whose connection the relay closed
	SlowDisconnects     float64 // xds_relay_downstream_disconnects_total{reason="slow_client"}
	Collapses           float64 // xds_relay_queue_collapses_total
	ClientDrops         int64   // streams of clients that keep up ended by the relay
	RelayCPU            time.Duration
}

// Quantile returns the q-quantile of the latencies (0 when none).
func (r *SlowResult) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[min(len(r.Latencies)-1, int(q*float64(len(r.Latencies))))]
}

// RunSlow runs the relay with clients that keep up and stalled ones, pushes
// changes and records the relay's memory and the others' update latency.
func RunSlow(ctx context.Context, cfg SlowConfig) (*SlowResult, error) {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if err := errors.Join(cfg.Topology.Validate(), cfg.Churn.Validate()); err != nil {
		return nil, err
	}
	up, classes, err := startUpstream(cfg.Classes, cfg.Topology)
	if err != nil {
		return nil, err
	}
	defer up.CP.Stop()
	relay, err := StartRelayChild(ctx, RelayChildConfig{Bin: cfg.RelayBin, Upstream: up.CP.Addr, ConfigFile: cfg.ConfigFile, Stderr: cfg.RelayStderr, Timeout: cfg.Timeout})
	if err != nil {
		return nil, err
	}
	defer relay.Stop()
	clientCtx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var stalled []*stalledClient
	defer func() {
		for _, s := range stalled {
			s.close()
		}
		stopClients()
		wg.Wait()
	}()
	clients := startProxyClients(clientCtx, &wg, cfg.Clients, classes, cfg.DeltaShare, relay.Addr)
	if _, _, err := awaitConvergence(ctx, up, clients, time.Now(), cfg.Timeout); err != nil {
		return nil, fmt.Errorf("initial sync: %w", err)
	}
	expected, err := up.Expected()
	if err != nil {
		return nil, err
	}
	for i := range cfg.Stalled {
		class := classes[i%len(classes)]
		s, err := startStalledClient(clientCtx, relay.Addr, i, class, expected[class])
		if err != nil {
			return nil, err
		}
		stalled = append(stalled, s)
	}
	cfg.Log("%d clients in sync, %d stalled clients subscribed; idle %v", cfg.Clients, cfg.Stalled, cfg.Idle)
	res := &SlowResult{Clients: cfg.Clients, Stalled: cfg.Stalled}
	sleep(ctx, cfg.Idle)
	before, err := relay.Usage()
	if err != nil {
		return nil, err
	}
	res.RSSBefore = before.RSS

	start := time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []RSSSample, 1)
	go func() { sampled <- sampleRSS(sampleCtx, relay, start, 250*time.Millisecond) }()
	cfg.Log("changes at %v/s for %v", cfg.Rate, cfg.Duration)
	interval := perSecond(cfg.Rate)
	more := func() bool {
		switch {
		case ctx.Err() != nil:
			return false
		case time.Since(start) < cfg.Duration:
			return true
		case !cfg.UntilStalledGone || time.Since(start) >= cfg.Duration+cfg.Timeout:
			return false
		}
		for _, s := range stalled {
			if !s.disconnected() {
				return true
			}
		}
		return false
	}
	for next := start; more(); next = next.Add(interval) {
		sleep(ctx, time.Until(next))
		t0 := time.Now()
		if err := up.Change(cfg.Churn); err != nil {
			stopSampling()
			<-sampled
			return nil, err
		}
		res.Changes++
		_, each, err := awaitConvergence(ctx, up, clients, t0, cfg.Timeout)
		if err != nil {
			res.NotConverged++
			cfg.Log("change %d: %v", res.Changes, err)
			if m, err := checkClients(up, clients); err == nil {
				for _, m := range m[:min(len(m), 3)] {
					cfg.Log("  %s", m)
				}
			}
			continue
		}
		res.Latencies = append(res.Latencies, each...)
	}
	sleep(ctx, cfg.Idle)
	stopSampling()
	res.RSS = <-sampled
	after, err := relay.Usage()
	if err != nil {
		return nil, err
	}
	res.RSSAfter, res.RelayCPU = after.RSS, after.CPU-before.CPU
	for _, s := range res.RSS {
		res.RSSPeak = max(res.RSSPeak, s.RSS)
	}
	slices.Sort(res.Latencies)
	for _, s := range stalled {
		if s.disconnected() {
			res.StalledDisconnected++
		}
	}
	res.ClientDrops = countDrops(clients, cfg.Log)
	if res.SlowDisconnects, err = relay.Metric("xds_relay_downstream_disconnects_total", `reason="slow_client"`); err != nil {
		return nil, err
	}
	if res.Collapses, err = relay.Metric("xds_relay_queue_collapses_total"); err != nil {
		return nil, err
	}
	return res, nil
}

// sampleRSS reads the relay's RSS now and every period until ctx ends.
func sampleRSS(ctx context.Context, relay *RelayChild, start time.Time, period time.Duration) []RSSSample {
	var out []RSSSample
	sample := func() error {
		if u, err := relay.Usage(); err == nil {
			out = append(out, RSSSample{At: time.Since(start), RSS: u.RSS})
		}
		return nil
	}
	sample()
	every(ctx, period, sample)
	return out
}
