package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// SoakConfig describes a soak: resource churn, client churn and upstream
// restarts together for a bounded time, then a check that every client
// holds exactly the upstream's state.
type SoakConfig struct {
	RelayBin      string
	UpstreamDelta bool   // the relay speaks incremental ADS upstream
	ConfigFile    string // the relay's --config (empty: none)
	Duration      time.Duration
	Clients       int
	Classes       int
	DeltaShare    float64 // fraction of clients speaking delta ADS (the rest SotW)
	Topology      Topology
	Churn         Churn
	ChurnRate     float64 // changes a second, each applied to every class
	// ClientChurnRate is client reconnections a second (a random client
	// each time drops its connection and opens a new one).
	ClientChurnRate float64
	RestartEvery    time.Duration // upstream restarts (0: none)
	MaxDown         time.Duration // an upstream restart is down for a random [MaxDown/4, MaxDown]
	ConvergeTimeout time.Duration // bound of each wait for convergence
	Log             func(format string, args ...any)
	RelayStderr     io.Writer
}

// SoakResult is what a soak measured. Convergence times run from the
// restarted upstream accepting connections (with one change made while it
// was down) to the last client holding the upstream's state.
type SoakResult struct {
	Clients          int             `json:"clients"`
	DeltaClients     int             `json:"delta_clients"`
	Classes          int             `json:"classes"`
	Duration         time.Duration   `json:"duration_ns"`
	Updates          int             `json:"updates"`   // snapshots published (all classes)
	Responses        int64           `json:"responses"` // responses the clients received
	ClientReconnects int64           `json:"client_reconnects"`
	ClientDrops      int64           `json:"client_drops"` // streams ended by something other than client churn
	UpstreamRestarts int             `json:"upstream_restarts"`
	Convergence      []time.Duration `json:"convergence_ns"` // per restart
	NotConverged     int             `json:"not_converged"`  // restarts after which clients did not converge in time
	InitialSync      time.Duration   `json:"initial_sync_ns"`
	FinalSync        time.Duration   `json:"final_sync_ns"` // from the end of churn to every client in sync
	RelayCPU         time.Duration   `json:"relay_cpu_ns"`
	RelayRSS         int64           `json:"relay_rss_bytes"`
	UpstreamStreams  []int           `json:"upstream_streams"` // ADS streams per upstream incarnation
	// ChosenRestarts: upstream streams the relay restarted itself (not
	// failures; xds_relay_upstream_restarts_total), each one more stream.
	ChosenRestarts int      `json:"chosen_restarts"`
	Mismatches     []string `json:"mismatches"` // per client, how its state differs
}

// StreamsProblem says how the upstream streams differ from one per class
// and incarnation, plus at most one for each restart the relay chose (a
// delta stream subscribing again to a name it unsubscribed from restarts,
// upstream.RestartPace apart); "" when they do not: no stream leaked or
// doubled.
func (r *SoakResult) StreamsProblem() string {
	streams := 0
	for i, n := range r.UpstreamStreams {
		streams += n
		if n < r.Classes {
			return fmt.Sprintf("upstream incarnation %d served %d ADS streams, want at least one per class (%d)", i, n, r.Classes)
		}
	}
	if least := r.Classes * len(r.UpstreamStreams); streams > least+r.ChosenRestarts {
		return fmt.Sprintf("%d ADS streams over %d upstream incarnations, want %d (one per class each) plus at most %d the relay chose to restart",
			streams, len(r.UpstreamStreams), least, r.ChosenRestarts)
	}
	return ""
}

// ConvergenceStats returns the min, median and max convergence time.
func (r *SoakResult) ConvergenceStats() (lo, p50, hi time.Duration) {
	if len(r.Convergence) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(r.Convergence))
	return s[0], s[len(s)/2], s[len(s)-1]
}

// soak is a running soak's parts.
type soak struct {
	cfg      SoakConfig
	upstream *Upstream
	relay    *RelayChild
	clients  []*ProxyClient
	// quiet is held by the restart loop while the upstream is down and
	// clients converge, and by each churn change: no change lands in a
	// convergence measurement.
	quiet sync.Mutex
}

// RunSoak runs a soak (see SoakConfig) and checks the end state. It returns
// an error for a failure to run; a wrong end state is in Mismatches.
func RunSoak(ctx context.Context, cfg SoakConfig) (*SoakResult, error) {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if err := errors.Join(cfg.Topology.Validate(), cfg.Churn.Validate()); err != nil {
		return nil, err
	}
	if cfg.Classes < 1 || cfg.Clients < cfg.Classes {
		return nil, fmt.Errorf("need at least one class and one client per class (classes %d, clients %d)", cfg.Classes, cfg.Clients)
	}
	s := &soak{cfg: cfg}
	up, classes, err := startUpstream(cfg.Classes, cfg.Topology)
	if err != nil {
		return nil, err
	}
	defer up.CP.Stop()
	s.upstream = up
	if s.relay, err = StartRelayChild(ctx, RelayChildConfig{Bin: cfg.RelayBin, Upstream: up.CP.Addr, UpstreamDelta: cfg.UpstreamDelta,
		ConfigFile: cfg.ConfigFile, Stderr: cfg.RelayStderr, Timeout: cfg.ConvergeTimeout}); err != nil {
		return nil, err
	}
	defer func() {
		t0 := time.Now()
		s.relay.Stop()
		cfg.Log("relay stopped in %v", time.Since(t0).Round(time.Millisecond))
	}()

	clientCtx, stopClients := context.WithCancel(ctx)
	var clientsDone sync.WaitGroup
	defer func() {
		stopClients()
		clientsDone.Wait()
	}()
	res := &SoakResult{Clients: cfg.Clients, Classes: cfg.Classes}
	s.clients = startProxyClients(clientCtx, &clientsDone, cfg.Clients, classes, cfg.DeltaShare, s.relay.Addr)
	for _, c := range s.clients {
		if c.Delta {
			res.DeltaClients++
		}
	}
	cfg.Log("%d clients (%d delta) over %d classes connecting", cfg.Clients, res.DeltaClients, cfg.Classes)
	start := time.Now()
	if _, err := s.awaitConvergence(ctx, start); err != nil {
		return nil, fmt.Errorf("initial sync: %w", err)
	}
	res.InitialSync = time.Since(start)
	cfg.Log("initial sync in %v; soaking for %v", res.InitialSync.Round(time.Millisecond), cfg.Duration)

	if err := s.soakPhase(ctx, res); err != nil {
		return nil, err
	}

	// The end: churn has stopped, the upstream is up; every client must
	// converge and then hold exactly the upstream's state.
	end := time.Now()
	if _, err := s.awaitConvergence(ctx, end); err != nil {
		cfg.Log("final convergence: %v", err)
	}
	res.FinalSync = time.Since(end)
	if res.Mismatches, err = checkClients(s.upstream, s.clients); err != nil {
		return nil, err
	}
	res.Duration = time.Since(start)
	u, err := s.relay.Usage()
	if err != nil {
		return nil, err
	}
	res.RelayCPU, res.RelayRSS = u.CPU, u.RSS
	restarts, err := s.relay.Metric("xds_relay_upstream_restarts_total")
	if err != nil {
		return nil, err
	}
	res.ChosenRestarts = int(restarts)
	res.Updates = s.upstream.Updates()
	res.UpstreamStreams = up.CP.StreamsPerIncarnation()
	for _, c := range s.clients {
		res.Responses += c.responses.Load()
	}
	res.ClientDrops = countDrops(s.clients, cfg.Log)
	return res, nil
}

// soakPhase runs churn, client churn and upstream restarts for the
// configured duration.
func (s *soak) soakPhase(ctx context.Context, res *SoakResult) error {
	cfg := s.cfg
	phase, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	churnErr := make(chan error, 1)
	wg.Go(func() {
		if err := RunChurn(phase, s.upstream, cfg.Churn, cfg.ChurnRate, &s.quiet); err != nil {
			churnErr <- err
			stop()
		}
	})
	var reconnects int64
	wg.Go(func() { reconnects = s.churnClients(phase) })
	var err error
	if cfg.RestartEvery > 0 {
		err = s.restarts(phase, res)
	} else {
		<-phase.Done()
	}
	stop()
	wg.Wait()
	res.ClientReconnects = reconnects
	select {
	case err = <-churnErr:
	default:
	}
	return err
}

// churnClients makes a random client reconnect at ClientChurnRate a second
// until ctx ends; it returns the number of reconnections.
func (s *soak) churnClients(ctx context.Context) int64 {
	if s.cfg.ClientChurnRate <= 0 {
		<-ctx.Done()
		return 0
	}
	var n int64
	every(ctx, perSecond(s.cfg.ClientChurnRate), func() error {
		s.clients[rand.IntN(len(s.clients))].Reconnect()
		n++
		return nil
	})
	return n
}

// restarts takes the upstream down every RestartEvery until ctx ends:
// down for a random while, one change made meanwhile, then up on the same
// address; it measures the time until every client holds the new state.
func (s *soak) restarts(ctx context.Context, res *SoakResult) error {
	cfg := s.cfg
	return every(ctx, cfg.RestartEvery, func() error {
		s.quiet.Lock()
		s.upstream.CP.Down()
		down := cfg.MaxDown/4 + rand.N(cfg.MaxDown-cfg.MaxDown/4+1)
		time.Sleep(down)
		err := s.upstream.Change(cfg.Churn)
		if err == nil {
			err = s.upstream.CP.Up(10 * time.Second)
		}
		if err != nil {
			s.quiet.Unlock()
			return err
		}
		up := time.Now()
		res.UpstreamRestarts++
		d, err := s.awaitConvergence(context.Background(), up)
		s.quiet.Unlock()
		if err != nil {
			res.NotConverged++
			cfg.Log("restart %d (down %v): %v", res.UpstreamRestarts, down.Round(time.Millisecond), err)
			return nil
		}
		res.Convergence = append(res.Convergence, d)
		cfg.Log("restart %d (down %v): every client converged %v after the upstream returned", res.UpstreamRestarts, down.Round(time.Millisecond), d.Round(time.Millisecond))
		return nil
	})
}

// awaitConvergence waits for every client (see awaitConvergence).
func (s *soak) awaitConvergence(ctx context.Context, since time.Time) (time.Duration, error) {
	last, _, err := awaitConvergence(ctx, s.upstream, s.clients, since, s.cfg.ConvergeTimeout)
	return last, err
}
