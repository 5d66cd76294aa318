package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"
)

// FanoutConfig describes one fan-out measurement: Clients wildcard CDS
// clients spread over Classes node classes, one update of Clusters clusters.
type FanoutConfig struct {
	// Target is "relay" (clients → relay child process → control plane) or
	// "direct" (clients → control plane, what users run without a relay).
	Target string
	// Cache is the control plane's cache: "snapshot" or "linear".
	Cache    string
	RelayBin string // path to an xds-relay binary (target relay)
	Clients  int
	Classes  int
	Clusters int
	Delta    bool // clients speak incremental ADS
	// UpstreamDelta makes the relay speak incremental ADS to the control plane.
	UpstreamDelta bool
	Timeout       time.Duration // for each phase (connect, update)
	Log           func(format string, args ...any)
	// RelayStderr receives the relay's log (nil: this process's stderr).
	RelayStderr io.Writer
}

// FanoutResult is what one run measured. Durations are from the moment the
// control plane was given the new snapshot to each client's receipt.
type FanoutResult struct {
	Target           string        `json:"target"`
	Cache            string        `json:"cache"`
	Clients          int           `json:"clients"`
	Classes          int           `json:"classes"`
	Clusters         int           `json:"clusters"`
	Delta            bool          `json:"delta"`
	First            time.Duration `json:"first_ns"`
	P50              time.Duration `json:"p50_ns"`
	P99              time.Duration `json:"p99_ns"`
	Last             time.Duration `json:"last_ns"`
	ResponseBytes    int           `json:"response_bytes"` // one client's update response
	ServerCPU        time.Duration `json:"server_cpu_ns"`  // the measured server process (relay, or the target serving clients), during the update
	ServerRSSIdle    int64         `json:"server_rss_idle_bytes"`
	ServerRSSAfter   int64         `json:"server_rss_after_bytes"`
	UpstreamStreams  int           `json:"upstream_streams"`
	UpstreamRequests int           `json:"upstream_requests"`
	// Latencies holds every client's upstream-send → receive time, sorted:
	// the latency CDF.
	Latencies []time.Duration `json:"latencies_ns"`
}

// RunFanout starts a control plane, the relay as a child process and the
// clients; waits for every client to hold the first version; then updates
// every class's snapshot once (one cluster changed) and measures.
func RunFanout(ctx context.Context, cfg FanoutConfig) (*FanoutResult, error) {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if cfg.Target == "" {
		cfg.Target = "relay"
	}
	if cfg.Cache == "" {
		cfg.Cache = "snapshot"
	}
	cp, err := StartControlPlane(cfg.Cache)
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	for k := 0; k < cfg.Classes; k++ {
		if err := cp.SetClusters(className(k), "v1", cfg.Clusters, -1); err != nil {
			return nil, err
		}
	}

	// In the relay target the relay is a child process, measured from /proc;
	// in the direct target the control plane shares this process with the
	// clients, so no CPU or memory figure is attributed to it.
	serverAddr := cp.Addr
	var relay *relayProc
	switch cfg.Target {
	case "relay":
		if relay, err = startRelay(ctx, cfg.RelayBin, cp.Addr, cfg.UpstreamDelta, cfg.Timeout, cfg.RelayStderr); err != nil {
			return nil, err
		}
		defer relay.stop()
		serverAddr = relay.addr
	case "direct":
	default:
		return nil, fmt.Errorf("unknown target %q (want relay or direct)", cfg.Target)
	}
	usage := func() (ProcUsage, error) {
		if relay == nil {
			return ProcUsage{}, nil
		}
		return ReadProc(relay.cmd.Process.Pid)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	receipts := make(chan Receipt, cfg.Clients)
	clients := make([]*Client, 0, cfg.Clients)
	defer func() {
		cancel()
		for _, c := range clients {
			c.Close()
		}
	}()
	cfg.Log("connecting %d clients", cfg.Clients)
	for i := 0; i < cfg.Clients; i++ {
		// 127.0.0.0/8: spread clients over source addresses so N can exceed
		// one address's ephemeral ports.
		src := net.IPv4(127, 0, byte(1+i/20000), 1)
		c, err := StartClient(ctx, serverAddr, src, i, className(i%cfg.Classes), cfg.Delta, receipts)
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}
	if _, err := await(receipts, cfg.Clients, "v1", cfg.Clusters, cfg.Timeout); err != nil {
		return nil, fmt.Errorf("initial state: %w", err)
	}
	idle, err := usage()
	if err != nil {
		return nil, err
	}

	cfg.Log("updating %d classes", cfg.Classes)
	start := time.Now()
	for k := 0; k < cfg.Classes; k++ {
		if err := cp.SetClusters(className(k), "v2", cfg.Clusters, 0); err != nil {
			return nil, err
		}
	}
	// One cluster changed: SotW clients get the full state again, delta
	// clients exactly the changed cluster.
	want := cfg.Clusters
	if cfg.Delta {
		want = 1
	}
	got, err := await(receipts, cfg.Clients, "v2", want, cfg.Timeout)
	if err != nil {
		return nil, fmt.Errorf("update: %w", err)
	}
	after, err := usage()
	if err != nil {
		return nil, err
	}
	lat := make([]time.Duration, len(got))
	for i, r := range got {
		lat[i] = r.At.Sub(start)
	}
	slices.Sort(lat)
	streams, requests := cp.Counts()
	return &FanoutResult{
		Target: cfg.Target, Cache: cfg.Cache,
		Clients: cfg.Clients, Classes: cfg.Classes, Clusters: cfg.Clusters, Delta: cfg.Delta,
		ResponseBytes: got[0].Bytes,
		First:         lat[0], P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Last: lat[len(lat)-1],
		ServerCPU: after.CPU - idle.CPU, ServerRSSIdle: idle.RSS, ServerRSSAfter: after.RSS,
		UpstreamStreams: streams, UpstreamRequests: requests,
		Latencies: lat,
	}, nil
}

func className(k int) string { return "bench-class-" + strconv.Itoa(k) }

// await collects exactly one receipt per client (the relay's versions are
// content hashes, not the control plane's, so a phase's receipt is the first
// one after the previous phase). A second receipt in one phase is an error:
// the relay must push once per change.
func await(receipts <-chan Receipt, n int, phase string, resources int, timeout time.Duration) ([]Receipt, error) {
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
		case <-deadline.C:
			return nil, fmt.Errorf("phase %s: %d of %d clients received it within %v", phase, len(seen), n, timeout)
		}
	}
	return out, nil
}

type relayProc struct {
	cmd  *exec.Cmd
	addr string
	done chan error
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func startRelay(ctx context.Context, bin, upstream string, upstreamDelta bool, timeout time.Duration, stderr io.Writer) (*relayProc, error) {
	if stderr == nil {
		stderr = os.Stderr
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--upstream", upstream, "--listen", addr, "--admin", admin}
	if upstreamDelta {
		args = append(args, "--upstream-protocol", "delta")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &relayProc{cmd: cmd, addr: addr, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.done:
			return nil, fmt.Errorf("relay exited: %v", err)
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, errors.New("relay not ready in time")
		}
	}
}

func (p *relayProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
