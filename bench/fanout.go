package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"
)

// Targets: the servers the clients can be measured against.
const (
	TargetRelay  = "relay"  // clients → relay (child) → control plane
	TargetDirect = "direct" // clients → go-control-plane (child)
	TargetLimit  = "limit"  // clients → bare gRPC writing pre-encoded bytes (child)
	TargetTCP    = "tcp"    // plain TCP clients → the same bytes on TCP (child)
)

// FanoutConfig describes one fan-out measurement: Clients wildcard CDS
// streams spread over Classes node classes, one update of Clusters clusters.
type FanoutConfig struct {
	// Target is TargetRelay, TargetDirect, TargetLimit or TargetTCP.
	Target string
	// Cache is the control plane's cache: "snapshot" or "linear".
	Cache    string
	RelayBin string // path to an xds-relay binary (target relay)
	// RelayConfig is an optional --config file for the relay.
	RelayConfig string
	// BenchBin is the path to an xds-bench binary, which runs the direct,
	// limit and tcp servers as child processes ("xds-bench serve").
	BenchBin string
	Clients  int
	Classes  int
	Clusters int
	Delta    bool // clients speak incremental xDS
	// Service is ServiceADS (default) or ServiceCDS; the tcp target has none.
	Service string
	// StreamsPerConn streams share one connection (default 1). The tcp
	// target's streams are connections, so it must be 1 there.
	StreamsPerConn int
	// ClientWindow is the clients' HTTP/2 window (ClientOptions.Window).
	ClientWindow int32
	// UpstreamDelta makes the relay speak incremental ADS to the control plane.
	UpstreamDelta bool
	Timeout       time.Duration // for each phase (connect, update)
	Log           func(format string, args ...any)
	// Progress, if set, is told each phase's advance (connecting streams,
	// receipts of a version).
	Progress func(phase string, total int) Progress
	// ServerStderr receives the measured server's log (nil: this process's
	// stderr).
	ServerStderr io.Writer
}

// Progress is one phase's progress report (a progress bar in xds-bench).
type Progress interface {
	Add(n int)
	Finish()
}

// FanoutResult is what one run measured. Durations are from the moment the
// server was given the new state to each client's receipt. Server figures
// are the measured child process's: the relay, or the target's own server.
type FanoutResult struct {
	Target         string        `json:"target"`
	Cache          string        `json:"cache"`   // relay and direct; empty for limit and tcp
	Clients        int           `json:"clients"` // streams
	StreamsPerConn int           `json:"streams_per_conn"`
	ClientWindow   int32         `json:"client_window,omitempty"` // 0: grpc-go's default
	Service        string        `json:"service"`                 // ads or cds; empty for tcp
	Classes        int           `json:"classes"`
	Clusters       int           `json:"clusters"`
	Delta          bool          `json:"delta"`
	First          time.Duration `json:"first_ns"`
	P50            time.Duration `json:"p50_ns"`
	P99            time.Duration `json:"p99_ns"`
	Last           time.Duration `json:"last_ns"`
	ResponseBytes  int           `json:"response_bytes"` // one client's update response
	BytesTotal     int64         `json:"bytes_total"`    // the update's bytes delivered to all clients
	ServerCPU      time.Duration `json:"server_cpu_ns"`  // during the update
	// ServerRSSBase is the server's RSS with the first state installed and
	// no client connected: per-stream memory is (idle − base) / clients.
	ServerRSSBase    int64 `json:"server_rss_base_bytes"`
	ServerRSSIdle    int64 `json:"server_rss_idle_bytes"`
	ServerRSSAfter   int64 `json:"server_rss_after_bytes"`
	UpstreamStreams  int   `json:"upstream_streams"` // on the control plane (relay, direct) or the server
	UpstreamRequests int   `json:"upstream_requests"`
	// Latencies holds every client's upstream-send → receive time, sorted:
	// the latency CDF.
	Latencies []time.Duration `json:"latencies_ns"`
}

// target is the measured server the clients connect to.
type target interface {
	listenAddr() string
	usage() (ProcUsage, error)
	set(ctx context.Context, version string, changed int) error
	counts(ctx context.Context) (streams, requests int, err error)
	stop()
}

func (s *serveProc) listenAddr() string        { return s.addr }
func (s *serveProc) usage() (ProcUsage, error) { return s.proc.usage() }

func (cfg *FanoutConfig) fillDefaults() error {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if cfg.Target == "" {
		cfg.Target = TargetRelay
	}
	if cfg.Cache == "" {
		cfg.Cache = "snapshot"
	}
	if cfg.Service == "" {
		cfg.Service = ServiceADS
	}
	if cfg.StreamsPerConn <= 0 {
		cfg.StreamsPerConn = 1
	}
	if cfg.ServerStderr == nil {
		cfg.ServerStderr = os.Stderr
	}
	if cfg.Clients < 1 || cfg.Classes < 1 || cfg.Clusters < 1 {
		return fmt.Errorf("clients (%d), classes (%d) and clusters (%d) must be positive", cfg.Clients, cfg.Classes, cfg.Clusters)
	}
	switch {
	case cfg.Service != ServiceADS && cfg.Service != ServiceCDS:
		return fmt.Errorf("unknown service %q (want %s or %s)", cfg.Service, ServiceADS, ServiceCDS)
	case cfg.Target == TargetDirect && cfg.Service != ServiceADS:
		return errors.New("the direct target's control plane serves ADS only")
	case cfg.Target == TargetTCP && cfg.StreamsPerConn != 1:
		return errors.New("the tcp target's streams are connections: streams per connection must be 1")
	}
	return nil
}

// startTarget starts cfg's target with no state installed.
func startTarget(ctx context.Context, cfg FanoutConfig) (target, error) {
	args := []string{"--classes", strconv.Itoa(cfg.Classes), "--clusters", strconv.Itoa(cfg.Clusters)}
	switch cfg.Target {
	case TargetRelay:
		return startRelayTarget(ctx, cfg)
	case TargetDirect:
		return startServe(ctx, cfg.BenchBin, ServeControlPlane, append(args, "--cache", cfg.Cache), cfg.ServerStderr, cfg.Timeout)
	case TargetLimit:
		return startServe(ctx, cfg.BenchBin, ServeLimit, args, cfg.ServerStderr, cfg.Timeout)
	case TargetTCP:
		return startServe(ctx, cfg.BenchBin, ServeTCP, args, cfg.ServerStderr, cfg.Timeout)
	}
	return nil, fmt.Errorf("unknown target %q (want %s, %s, %s or %s)", cfg.Target, TargetRelay, TargetDirect, TargetLimit, TargetTCP)
}

// RunFanout starts the target's server as a child process and the clients;
// waits for every client to hold the first version; then updates every
// class's state once (one cluster changed) and measures.
func RunFanout(ctx context.Context, cfg FanoutConfig) (*FanoutResult, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, err
	}
	srv, err := startTarget(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if err := srv.set(ctx, "v1", -1); err != nil {
		return nil, err
	}
	base, err := srv.usage()
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	receipts := make(chan Receipt, cfg.Clients)
	clients, err := connect(ctx, cfg, srv.listenAddr(), receipts)
	defer func() {
		cancel()
		for _, c := range clients {
			c.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	if _, err := awaitPhase(cfg, receipts, "v1", cfg.Clusters); err != nil {
		return nil, fmt.Errorf("initial state: %w", err)
	}
	idle, err := srv.usage()
	if err != nil {
		return nil, err
	}

	cfg.Log("updating %d classes", cfg.Classes)
	start := time.Now()
	if err := srv.set(ctx, "v2", 0); err != nil {
		return nil, err
	}
	// One cluster changed: SotW clients get the full state again, delta
	// clients exactly the changed cluster.
	want := cfg.Clusters
	if cfg.Delta {
		want = 1
	}
	got, err := awaitPhase(cfg, receipts, "v2", want)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	after, err := srv.usage()
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, len(got))
	var total int64
	for i, r := range got {
		lat[i] = r.At.Sub(start)
		total += int64(r.Bytes)
	}
	slices.Sort(lat)
	streams, requests, err := srv.counts(ctx)
	if err != nil {
		return nil, err
	}
	cache, service := cfg.Cache, cfg.Service
	if cfg.Target == TargetLimit || cfg.Target == TargetTCP {
		cache = "" // no control plane
	}
	if cfg.Target == TargetTCP {
		service = ""
	}
	return &FanoutResult{
		Target: cfg.Target, Cache: cache,
		Clients: cfg.Clients, StreamsPerConn: cfg.StreamsPerConn, ClientWindow: cfg.ClientWindow, Service: service,
		Classes: cfg.Classes, Clusters: cfg.Clusters, Delta: cfg.Delta,
		ResponseBytes: got[0].Bytes, BytesTotal: total,
		First: lat[0], P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Last: lat[len(lat)-1],
		ServerCPU:     after.CPU - idle.CPU,
		ServerRSSBase: base.RSS, ServerRSSIdle: idle.RSS, ServerRSSAfter: after.RSS,
		UpstreamStreams: streams, UpstreamRequests: requests,
		Latencies: lat,
	}, nil
}

func className(k int) string { return "bench-class-" + strconv.Itoa(k) }

// connect opens cfg.Clients streams to addr, StreamsPerConn per connection,
// connection j from source address 127.0.x.1 (x = 1 + j/20000) so N can
// exceed one address's ephemeral ports. It returns what it opened even on
// error, for the caller to close.
func connect(ctx context.Context, cfg FanoutConfig, addr string, out chan<- Receipt) ([]interface{ Close() }, error) {
	cfg.Log("connecting %d streams, %d per connection", cfg.Clients, cfg.StreamsPerConn)
	bar := startProgress(cfg, "connecting", cfg.Clients)
	defer bar.Finish()
	var clients []interface{ Close() }
	for first, j := 0, 0; first < cfg.Clients; first, j = first+cfg.StreamsPerConn, j+1 {
		src := loopbackSource(j)
		if cfg.Target == TargetTCP {
			c, err := startTCPClient(ctx, addr, src, first, cfg.Delta, out)
			if err != nil {
				return clients, err
			}
			clients = append(clients, c)
			bar.Add(1)
			continue
		}
		n := min(cfg.StreamsPerConn, cfg.Clients-first)
		ids, classes := make([]int, n), make([]string, n)
		for k := range n {
			ids[k], classes[k] = first+k, className((first+k)%cfg.Classes)
		}
		c, err := Dial(ctx, addr, src, ClientOptions{Delta: cfg.Delta, Service: cfg.Service, Window: cfg.ClientWindow}, ids, classes, out)
		if err != nil {
			return clients, err
		}
		clients = append(clients, c)
		bar.Add(n)
	}
	return clients, nil
}

// awaitPhase awaits one receipt per client, with cfg's timeout and progress.
func awaitPhase(cfg FanoutConfig, receipts <-chan Receipt, phase string, resources int) ([]Receipt, error) {
	bar := startProgress(cfg, "awaiting "+phase, cfg.Clients)
	defer bar.Finish()
	return await(receipts, cfg.Clients, phase, resources, cfg.Timeout, bar.Add)
}

// await collects exactly one receipt per client (the relay's versions are
// content hashes, not the control plane's, so a phase's receipt is the first
// one after the previous phase). A second receipt in one phase is an error:
// the server must push once per change.
func await(receipts <-chan Receipt, n int, phase string, resources int, timeout time.Duration, progress func(int)) ([]Receipt, error) {
	seen := make(map[int]bool, n)
	out := make([]Receipt, 0, n)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(seen) < n {
		select {
		case r := <-receipts:
			if seen[r.Client] {
				return nil, fmt.Errorf("client %d received a second response in phase %s", r.Client, phase)
			}
			if r.Resources != resources {
				return nil, fmt.Errorf("client %d received %d resources, want %d", r.Client, r.Resources, resources)
			}
			seen[r.Client] = true
			out = append(out, r)
			progress(1)
		case <-deadline.C:
			return nil, fmt.Errorf("phase %s: %d of %d clients received it within %v", phase, len(seen), n, timeout)
		}
	}
	return out, nil
}

// noProgress is the Progress of a run without a reporter.
type noProgress struct{}

func (noProgress) Add(int) {}
func (noProgress) Finish() {}

func startProgress(cfg FanoutConfig, phase string, total int) Progress {
	if cfg.Progress == nil {
		return noProgress{}
	}
	return cfg.Progress(phase, total)
}
