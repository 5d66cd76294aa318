package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
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
	// Unique is the fraction of each class's clusters unique to the class
	// (1 − xds-bench's --overlap); the rest are byte-identical in every
	// class. 0, the default, makes every class's state the same.
	Unique float64
	// Churn, if positive, adds a sustained run after the update: Churn EDS
	// updates per second spread round robin over the classes for
	// ChurnDuration, every SotW client subscribed to its class's load
	// assignment (targets relay, limit and direct:snapshot).
	Churn         float64
	ChurnDuration time.Duration
	// HeapProfile, if set, is a file the relay target's heap profile
	// (/debug/pprof/heap?gc=1 on its admin port) is written to once every
	// client holds the update, HeapProfileWait after (a response keeps its
	// bodies for shard.BodyKeepAlive after streams last asked for them).
	HeapProfile     string
	HeapProfileWait time.Duration
	// CPUProfile, if set, is a file the relay target's CPU profile
	// (/debug/pprof/profile on its admin port) is written to: it runs for
	// CPUProfileFor from just before the timed update (an idle relay adds
	// next to no samples, so the window may be generous).
	CPUProfile    string
	CPUProfileFor time.Duration
	Delta         bool // clients speak incremental xDS
	// Service is ServiceADS (default) or ServiceCDS; the tcp target has none.
	Service string
	// StreamsPerConn streams share one connection (default 1). The tcp
	// target's streams are connections, so it must be 1 there.
	StreamsPerConn int
	// ClientWindow is the clients' HTTP/2 window (ClientOptions.Window).
	ClientWindow int32
	// UpstreamDelta makes the relay speak incremental ADS to the control plane.
	UpstreamDelta bool
	// ControlPlaneChild runs the relay target's control plane as a child
	// process of its own (xds-bench serve controlplane, as the direct
	// target's) instead of in the bench process, so that its CPU and RSS
	// are measured (FanoutResult.ControlPlane): the control plane's cost
	// through the relay, against direct's.
	ControlPlaneChild bool

	Timeout time.Duration // for each phase (connect, update)
	Log     func(format string, args ...any)
	// Progress, if set, is told each phase's advance (connecting streams,
	// receipts of a version).
	Progress func(phase string, total int) Progress
	// ServerStderr receives the measured server's log (nil: this process's
	// stderr).
	ServerStderr io.Writer
	// Pace installs class k's state k × Pace after the update began, for
	// every target (pace.go); 0: as fast as each server can.
	Pace time.Duration
	// Rounds repeats the timed update, each round one cluster changed from
	// the last (default 1); the time and CPU figures are the median
	// round's of each (rounds.go).
	Rounds int
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
	Target         string `json:"target"`
	Cache          string `json:"cache"`   // relay and direct; empty for limit and tcp
	Clients        int    `json:"clients"` // streams
	StreamsPerConn int    `json:"streams_per_conn"`
	ClientWindow   int32  `json:"client_window,omitempty"` // 0: grpc-go's default
	Service        string `json:"service"`                 // ads or cds; empty for tcp
	Classes        int    `json:"classes"`
	Clusters       int    `json:"clusters"`
	Delta          bool   `json:"delta"`
	// Unique is the fraction of each class's clusters unique to the class
	// (1 − --overlap); results that predate it, whose classes were all
	// identical, read 0.
	Unique float64 `json:"unique"`
	// Pace is FanoutConfig.Pace: class k's state was installed k × Pace
	// after the update began, for every target alike (0: as fast as each
	// could).
	Pace time.Duration `json:"pace_ns,omitempty"`
	// UpstreamDelta: the relay spoke incremental ADS to its control plane
	// (relay runs only; the other targets have no upstream).
	UpstreamDelta bool `json:"upstream_delta,omitempty"`
	// ServerConnectCPU is the server's CPU over the connection wave: from
	// before the first client dialled until every client held the first
	// state (and, with churn, its first load assignment).
	ServerConnectCPU time.Duration `json:"server_connect_cpu_ns"`
	// ControlPlane is the control plane's own process, where it is one:
	// the direct target's server, and the relay target's upstream with
	// FanoutConfig.ControlPlaneChild; nil where it is not measured (the
	// relay's control plane in the bench process; limit and tcp have none).
	ControlPlane *ControlPlaneUsage `json:"control_plane,omitempty"`
	// StateBytes is every class's resources' encoded bytes summed over the
	// classes; StateUniqueBytes counts each distinct resource once.
	StateBytes       int64         `json:"state_bytes"`
	StateUniqueBytes int64         `json:"state_unique_bytes"`
	First            time.Duration `json:"first_ns"`
	P50              time.Duration `json:"p50_ns"`
	P99              time.Duration `json:"p99_ns"`
	Last             time.Duration `json:"last_ns"`
	ResponseBytes    int           `json:"response_bytes"` // one client's update response
	BytesTotal       int64         `json:"bytes_total"`    // the update's bytes delivered to all clients
	ServerCPU        time.Duration `json:"server_cpu_ns"`  // during the update
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
	// UpstreamSent is when the sender of the update had finished sending
	// every class's (from the same start as the latencies): for the relay,
	// the last class's go-control-plane Send to it returned; for the other
	// targets, which are their own senders, the server had published the
	// new state (its "set" returned). After* are each client's time from
	// its own class's sent instant to its receipt: the time to the last
	// client with the upstream's own sending taken out.
	UpstreamSent  time.Duration `json:"upstream_sent_ns"`
	AfterSentP50  time.Duration `json:"after_sent_p50_ns"`
	AfterSentP99  time.Duration `json:"after_sent_p99_ns"`
	AfterSentLast time.Duration `json:"after_sent_last_ns"`
	// Churn is the sustained EDS run's result (FanoutConfig.Churn).
	Churn *ChurnResult `json:"churn,omitempty"`
	// RoundsCPU and RoundsLast are each round's server CPU and time to the
	// last client when the update was repeated (FanoutConfig.Rounds > 1);
	// the figures above are then the median round's of each (rounds.go).
	RoundsCPU  []time.Duration `json:"rounds_cpu_ns,omitempty"`
	RoundsLast []time.Duration `json:"rounds_last_ns,omitempty"`
}

// ControlPlaneUsage is what the control plane's process spent: through the
// relay it serves one stream per class, direct one per client.
type ControlPlaneUsage struct {
	// Child: the relay target's control plane ran as a child process
	// (FanoutConfig.ControlPlaneChild); false for direct, whose server it is.
	Child bool `json:"child"`
	// ConnectCPU is its CPU over the connection wave (as
	// FanoutResult.ServerConnectCPU), UpdateCPU over the timed update (the
	// median round's; each round's in RoundsCPU).
	ConnectCPU time.Duration   `json:"connect_cpu_ns"`
	UpdateCPU  time.Duration   `json:"update_cpu_ns"`
	RoundsCPU  []time.Duration `json:"rounds_cpu_ns,omitempty"`
	// RSS with the first state installed before any client, once every
	// client held it, and at the end.
	RSSBase  int64 `json:"rss_base_bytes"`
	RSSIdle  int64 `json:"rss_idle_bytes"`
	RSSAfter int64 `json:"rss_after_bytes"`
}

// target is the measured server the clients connect to.
type target interface {
	listenAddr() string
	usage() (ProcUsage, error)
	// set installs version of every class's state and returns when the
	// server had handed it to its streams (its own clock, not when the
	// reply was read).
	set(ctx context.Context, version string, changed int) (time.Time, error)
	// prepare does, before the measurement, the work of a later set of
	// the same arguments that is not serving (encoding the limit's state).
	prepare(ctx context.Context, version string, changed int) error
	// setAssignment installs churn update seq of class k's load
	// assignment; the time as set's.
	setAssignment(ctx context.Context, k, seq int) (time.Time, error)
	// sentAt is when the upstream finished sending version of typeURL to
	// class k's stream; false when the target has no upstream (it sends
	// what "set" gave it: the caller takes set's time).
	sentAt(ctx context.Context, k int, typeURL, version string) (time.Time, bool, error)
	counts(ctx context.Context) (streams, requests int, err error)
	stop()
}

// sentAt is when the child installed class k's clusters of version, if it
// paced the classes in that set; the caller takes set's instant otherwise
// (and for anything else, such as a churn's load assignments).
func (s *serveProc) sentAt(_ context.Context, k int, typeURL, version string) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if typeURL == ClusterType && version == s.installedVersion && k < len(s.installedAt) {
		return s.installedAt[k], true, nil
	}
	return time.Time{}, false, nil
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
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if cfg.ServerStderr == nil {
		cfg.ServerStderr = os.Stderr
	}
	if cfg.Clients < 1 || cfg.Classes < 1 || cfg.Clusters < 1 {
		return fmt.Errorf("clients (%d), classes (%d) and clusters (%d) must be positive", cfg.Clients, cfg.Classes, cfg.Clusters)
	}
	if cfg.Unique < 0 || cfg.Unique > 1 {
		return fmt.Errorf("overlap %v: want 0 to 1", 1-cfg.Unique)
	}
	if !cfg.workload().uniform() && cfg.Cache == "linear" && (cfg.Target == TargetRelay || cfg.Target == TargetDirect) {
		return errors.New("the linear cache serves one set to every class: an overlap below 1 needs the snapshot cache")
	}
	if cfg.Churn > 0 {
		switch {
		case cfg.Delta:
			return errors.New("churn: SotW clients only")
		case cfg.Target == TargetTCP:
			return errors.New("churn: the tcp target carries no EDS")
		case cfg.Target != TargetLimit && cfg.Cache != "snapshot":
			return errors.New("churn: the control plane's load assignments need the snapshot cache")
		case cfg.ChurnDuration <= 0:
			return errors.New("churn: a positive duration is needed")
		}
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

// workload is what each class's state is.
func (cfg *FanoutConfig) workload() Workload {
	return Workload{Classes: cfg.Classes, Clusters: cfg.Clusters, Overlap: 1 - cfg.Unique}
}

// startTarget starts cfg's target with no state installed.
func startTarget(ctx context.Context, cfg FanoutConfig) (target, error) {
	args := []string{"--classes", strconv.Itoa(cfg.Classes), "--clusters", strconv.Itoa(cfg.Clusters),
		"--overlap", strconv.FormatFloat(1-cfg.Unique, 'g', -1, 64), "--pace", cfg.Pace.String()}
	switch cfg.Target {
	case TargetRelay:
		return startRelayTarget(ctx, cfg, append(args, "--cache", cfg.Cache))
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
// class's state once (one cluster changed) and measures; then, with
// cfg.Churn, runs the sustained EDS churn (RunFanout's ChurnResult).
func RunFanout(ctx context.Context, cfg FanoutConfig) (*FanoutResult, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, err
	}
	w := cfg.workload()
	stateAll, stateUnique, err := w.StateBytes()
	if err != nil {
		return nil, err
	}
	srv, err := startTarget(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	if _, err := srv.set(ctx, "v1", -1); err != nil {
		return nil, err
	}
	var churn *churnRun
	if cfg.Churn > 0 {
		if churn, err = startChurn(ctx, cfg, srv); err != nil {
			return nil, err
		}
		defer churn.stop()
	}
	cp := controlPlaneOf(srv)
	base, err := srv.usage()
	if err != nil {
		return nil, err
	}
	var cpBase ProcUsage
	if cp != nil {
		if cpBase, err = cp(); err != nil {
			return nil, err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	receipts := make(chan Receipt, cfg.Clients)
	clients, err := connect(ctx, cfg, srv.listenAddr(), receipts, churn)
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
	if churn != nil {
		if err := churn.awaitInitial(cfg.Timeout); err != nil {
			return nil, fmt.Errorf("initial load assignments: %w", err)
		}
	}
	connected, err := srv.usage()
	if err != nil {
		return nil, err
	}
	var cpUsage *ControlPlaneUsage
	if cp != nil {
		cpConnected, err := cp()
		if err != nil {
			return nil, err
		}
		cpUsage = &ControlPlaneUsage{Child: true, ConnectCPU: cpConnected.CPU - cpBase.CPU,
			RSSBase: cpBase.RSS, RSSIdle: cpConnected.RSS}
	}
	profiled := startCPUProfile(srv, cfg.CPUProfile, cfg.CPUProfileFor)
	rounds := make([]round, 0, cfg.Rounds)
	var idle ProcUsage
	for r := range cfg.Rounds {
		rd, before, err := timedUpdate(ctx, cfg, srv, cp, receipts, r)
		if err != nil {
			return nil, err
		}
		if r == 0 {
			idle = before // every client holding the first state
		}
		rounds = append(rounds, rd)
	}
	after, err := srv.usage()
	if err != nil {
		return nil, err
	}
	if cp != nil {
		cpAfter, err := cp()
		if err != nil {
			return nil, err
		}
		cpUsage.RSSAfter = cpAfter.RSS
	}
	if err := <-profiled; err != nil {
		return nil, err
	}
	if cfg.HeapProfile != "" {
		if cfg.HeapProfileWait > 0 {
			select {
			case <-time.After(cfg.HeapProfileWait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err := writeHeapProfile(srv, cfg.HeapProfile); err != nil {
			return nil, err
		}
		if u, err := srv.usage(); err == nil {
			cfg.Log("heap profile written; server RSS %.1f MiB", float64(u.RSS)/(1<<20))
		}
	}
	var churnRes *ChurnResult
	if churn != nil {
		if churnRes, err = churn.run(ctx); err != nil {
			return nil, fmt.Errorf("churn: %w", err)
		}
	}
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
	res := &FanoutResult{
		Target: cfg.Target, Cache: cache,
		Clients: cfg.Clients, StreamsPerConn: cfg.StreamsPerConn, ClientWindow: cfg.ClientWindow, Service: service,
		Classes: cfg.Classes, Clusters: cfg.Clusters, Delta: cfg.Delta, Unique: cfg.Unique,
		Pace: cfg.Pace, UpstreamDelta: cfg.UpstreamDelta && cfg.Target == TargetRelay,
		StateBytes: stateAll, StateUniqueBytes: stateUnique,
		ServerRSSBase: base.RSS, ServerRSSIdle: idle.RSS, ServerRSSAfter: after.RSS,
		ServerConnectCPU: connected.CPU - base.CPU, ControlPlane: cpUsage,
		UpstreamStreams: streams, UpstreamRequests: requests,
		Churn: churnRes,
	}
	summarize(res, rounds)
	if cfg.Target == TargetDirect {
		res.ControlPlane = &ControlPlaneUsage{ConnectCPU: res.ServerConnectCPU, UpdateCPU: res.ServerCPU, RoundsCPU: res.RoundsCPU,
			RSSBase: res.ServerRSSBase, RSSIdle: res.ServerRSSIdle, RSSAfter: res.ServerRSSAfter}
	}
	return res, nil
}

// controlPlaneOf reads the usage of the relay target's control plane
// child (FanoutConfig.ControlPlaneChild); nil for every other target and
// for the control plane in this process. The direct target's control plane
// is its server: its figures are the server's (RunFanout).
func controlPlaneOf(srv target) func() (ProcUsage, error) {
	if t, ok := srv.(*relayTarget); ok && t.cpChild != nil {
		return t.cpChild.usage
	}
	return nil
}

// startCPUProfile starts the relay target's CPU profile for d and returns
// a channel that receives the outcome once it is written to file (nil at
// once when file is "" or the target is not the relay).
func startCPUProfile(srv target, file string, d time.Duration) <-chan error {
	done := make(chan error, 1)
	rt, ok := srv.(*relayTarget)
	if file == "" || !ok {
		done <- nil
		return done
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", rt.relay.Admin, max(1, int(d.Round(time.Second)/time.Second)))
	go func() {
		done <- func() error {
			resp, err := http.Get(url)
			if err != nil {
				return fmt.Errorf("cpu profile: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("cpu profile: %s", resp.Status)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return fmt.Errorf("cpu profile: %w", err)
			}
			return os.WriteFile(file, b, 0o644)
		}()
	}()
	return done
}

// writeHeapProfile saves the relay target's heap profile to file, and the
// runtime's memory statistics (the "# runtime.MemStats" lines of the text
// profile: heap in use, idle, released, stacks, next GC) to file.memstats.
func writeHeapProfile(srv target, file string) error {
	rt, ok := srv.(*relayTarget)
	if !ok {
		return nil // only the relay has an admin port
	}
	get := func(query string) ([]byte, error) {
		resp, err := http.Get("http://" + rt.relay.Admin + "/debug/pprof/heap?" + query)
		if err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("heap profile: %s", resp.Status)
		}
		return io.ReadAll(resp.Body)
	}
	b, err := get("gc=1")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return err
	}
	text, err := get("debug=1")
	if err != nil {
		return err
	}
	_, stats, ok := bytes.Cut(text, []byte("# runtime.MemStats"))
	if !ok {
		return errors.New("heap profile: no runtime.MemStats in the text profile")
	}
	return os.WriteFile(file+".memstats", append([]byte("# runtime.MemStats"), stats...), 0o644)
}

// classPrefix begins every class's name (className).
const classPrefix = "bench-class-"

func className(k int) string { return classPrefix + strconv.Itoa(k) }

// connect opens cfg.Clients streams to addr, StreamsPerConn per connection,
// connection j from source address 127.0.x.1 (x = 1 + j/20000) so N can
// exceed one address's ephemeral ports. It returns what it opened even on
// error, for the caller to close.
func connect(ctx context.Context, cfg FanoutConfig, addr string, out chan<- Receipt, churn *churnRun) ([]interface{ Close() }, error) {
	cfg.Log("connecting %d streams, %d per connection", cfg.Clients, cfg.StreamsPerConn)
	bar := startProgress(cfg, "connecting", cfg.Clients)
	defer bar.Finish()
	var clients []interface{ Close() }
	for first, j := 0, 0; first < cfg.Clients; first, j = first+cfg.StreamsPerConn, j+1 {
		src := loopbackSource(j)
		if cfg.Target == TargetTCP {
			c, err := startTCPClient(ctx, addr, src, first, first%cfg.Classes, cfg.Delta, out)
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
		opts := ClientOptions{Delta: cfg.Delta, Service: cfg.Service, Window: cfg.ClientWindow}
		if churn != nil {
			opts.EDS, opts.EDSOut = ChurnAssignment, churn.receipts
		}
		c, err := Dial(ctx, addr, src, opts, ids, classes, out)
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
