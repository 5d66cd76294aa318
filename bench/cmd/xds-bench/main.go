// Command xds-bench measures the relay's fan-out against reference servers:
// it runs N raw xDS clients against a target (the relay in front of a
// go-control-plane upstream, go-control-plane itself, a bare gRPC server or
// plain TCP writing the same bytes), each target's server a child process
// measured from /proc; pushes one CDS update and reports upstream-send →
// client-receive times (raw, and after the upstream had sent each class's
// update) and the server's CPU and memory; with --churn, then sustained EDS
// updates and their latency percentiles. It sweeps every combination of
// --classes, --clients and --target and prints them side by side. See
// docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/bench"
)

const usage = `usage: xds-bench [flags]
       xds-bench report --out DIR FILE.json... (figures and a summary; see report --help)
       xds-bench soak [flags]   (churn, client churn and upstream restarts; checks the end state)
       xds-bench slow [flags]   (stalled clients: relay memory and the others' latency)
       xds-bench serve controlplane|limit|tcp [--cache C] [--classes N] [--clusters N]
                 (a measured server, run by xds-bench itself; commands on stdin)

Targets (--target, comma-separated; relay and direct take :snapshot or :linear
to choose the control plane's cache, default --cache):
  relay   clients → xds-relay (child process) → go-control-plane (in xds-bench;
          a child process too with --control-plane-process)
  direct  clients → go-control-plane (child process): what users run without a relay
  limit   clients → a bare gRPC server (child) writing one pre-encoded response
          to every stream: the floor for any gRPC relay on this machine
  tcp     plain TCP clients → a server (child) writing the same bytes as
          length-prefixed frames: the kernel/loopback floor

Every combination of --classes, --clients and --target runs in sequence, each
with fresh processes; the table at the end gives ratios to limit at the same N
and class count. "upstream sent" is when the last class's update had been sent
(the relay's control plane, timed; other targets: their own publication), and
"last after sent" the time to the last client from its own class's instant.

flags:
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == "soak" {
		os.Exit(soakMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "slow" {
		os.Exit(slowMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "report" {
		os.Exit(reportMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		if err := bench.Serve(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fail(err)
		}
		return
	}
	targets := flag.String("target", "relay", "comma-separated targets: relay, direct, limit, tcp (relay and direct: NAME:snapshot or NAME:linear)")
	cacheKind := flag.String("cache", "snapshot", "default go-control-plane cache of relay and direct: snapshot or linear")
	clientList := flag.String("clients", "1000", "comma-separated numbers of client streams (wildcard CDS) to sweep")
	classList := flag.String("classes", "1", "comma-separated numbers of node classes the clients are spread over (round robin), to sweep")
	clusters := flag.Int("clusters", 1000, "clusters in each class's CDS state")
	overlap := flag.Float64("overlap", 1, "fraction of each class's clusters byte-identical across classes (the rest are unique to their class: same names, another EDS service name)")
	churn := flag.Float64("churn", 0, "after the update, a sustained run of this many EDS updates per second spread round robin over the classes, every client subscribed to its class's load assignment; reports update → client latency percentiles (SotW; targets relay, limit, direct:snapshot)")
	duration := flag.Duration("duration", 30*time.Second, "how long --churn updates")
	heapDir := flag.String("heap-profile", "", "write the relay's heap profile (/debug/pprof/heap?gc=1 on its admin port), taken once every client holds the update, to DIR/heap-CLASSESc-Nn.pb.gz")
	cpuDir := flag.String("cpu-profile", "", "write the relay's CPU profile (/debug/pprof/profile on its admin port), taken from just before the update for --cpu-profile-for, to DIR/cpu-CLASSESc-Nn.pb.gz")
	cpuFor := flag.Duration("cpu-profile-for", 3*time.Second, "how long --cpu-profile samples (whole seconds); an idle relay adds next to no samples")
	heapWait := flag.Duration("heap-wait", 0, "with --heap-profile: wait this long after every client holds the update before taking it (responses keep their bodies shard.BodyKeepAlive after last use)")
	delta := flag.Bool("delta", false, "clients speak incremental (delta) xDS instead of state of the world")
	service := flag.String("service", bench.ServiceADS, "gRPC service the clients use: ads (aggregated) or cds (ClusterDiscoveryService); direct serves ads only")
	perConn := flag.Int("streams-per-conn", 1, "client streams sharing one gRPC connection (tcp: must be 1); the relay allows 100 by default (limits.max_streams_per_connection)")
	window := flag.Int("client-window", 0, fmt.Sprintf("HTTP/2 flow-control window (bytes) the gRPC clients advertise per stream and connection; 0: grpc-go's default (64 KiB, grown by BDP estimation); %d is Envoy's default", bench.EnvoyWindow))
	upstreamDelta := flag.Bool("upstream-delta", false, "the relay speaks incremental (delta) ADS to the control plane")
	cpProcess := flag.Bool("control-plane-process", false, "run the relay target's control plane as a child process of its own (xds-bench serve controlplane, as direct's) and report its CPU and RSS beside direct's")
	relayBin := flag.String("relay-bin", "", "xds-relay binary to measure (default: build ./cmd/xds-relay)")
	relayConfig := flag.String("relay-config", "", "the relay's --config file (its limits: max_streams 200000, max_streams_per_connection 100 by default)")
	timeout := flag.Duration("timeout", 2*time.Minute, "time limit of each phase")
	pace := flag.Duration("pace", 0, "install class k's state k × pace after the update began, for every target alike (the relay's control plane sets it then, limit, tcp and direct publish it then); 0: as fast as each can")
	rounds := flag.Int("rounds", 1, "repeat the timed update this many times (each one cluster changed from the last) and report the median round's time and CPU: one round is a lottery for a garbage collection")
	jsonOut := flag.String("json", "", "write the results as a JSON array to this file")
	quiet := flag.Bool("quiet", false, "no progress bars (shown only when stderr is a terminal)")
	warmup := flag.Bool("warmup", true, "first run the first target at the largest N once, unmeasured: the bench process's own first-run costs (its heap growing to hold N clients' buffers) must not land on whichever target runs first")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	flag.Parse()

	if *window != 0 && (*window < 64<<10 || *window > math.MaxInt32) {
		fail(fmt.Errorf("--client-window: %d; gRPC takes 65536 to %d bytes (0: its default)", *window, math.MaxInt32))
	}
	ns, err := parseInts(*clientList)
	if err != nil {
		fail(fmt.Errorf("--clients: %w", err))
	}
	classSweep, err := parseInts(*classList)
	if err != nil {
		fail(fmt.Errorf("--classes: %w", err))
	}
	if *overlap < 0 || *overlap > 1 {
		fail(fmt.Errorf("--overlap %v: want 0 to 1", *overlap))
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	base := bench.FanoutConfig{
		BenchBin: self, RelayConfig: *relayConfig,
		Clusters: *clusters, Unique: 1 - *overlap, Churn: *churn, ChurnDuration: *duration,
		Delta: *delta, Service: *service, StreamsPerConn: *perConn,
		ClientWindow: int32(*window), UpstreamDelta: *upstreamDelta, ControlPlaneChild: *cpProcess, Timeout: *timeout, Rounds: *rounds, Pace: *pace,
		Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "xds-bench: "+f+"\n", a...) },
	}
	specs := strings.Split(*targets, ",")
	for _, s := range specs {
		if name, _, _ := strings.Cut(s, ":"); name == bench.TargetRelay {
			bin, cleanup, err := relayBinary(*relayBin)
			if err != nil {
				fail(err)
			}
			defer cleanup()
			base.RelayBin = bin
			break
		}
	}

	configFor := func(spec string, n, classes int) bench.FanoutConfig {
		cfg := base
		cfg.Clients, cfg.Classes = n, classes
		cfg.Target, cfg.Cache, _ = strings.Cut(spec, ":")
		if cfg.Cache == "" {
			cfg.Cache = *cacheKind
		}
		return cfg
	}
	if *warmup {
		cfg := configFor(specs[0], slices.Max(ns), classSweep[0])
		cfg.Churn = 0
		cfg.Progress = terminalProgress(*quiet, "warm-up")
		if _, err := bench.RunFanout(context.Background(), cfg); err != nil {
			fmt.Fprintf(os.Stderr, "xds-bench: warm-up (%s N=%d): %v\n", specs[0], cfg.Clients, err)
		}
	}
	results := []*bench.FanoutResult{} // JSON: [] rather than null
	failed := false
	for _, classes := range classSweep {
		for _, n := range ns {
			for _, spec := range specs {
				cfg := configFor(spec, n, classes)
				name := fmt.Sprintf("%s N=%d classes=%d", spec, n, classes)
				cfg.Progress = terminalProgress(*quiet, name)
				if *heapDir != "" && cfg.Target == bench.TargetRelay {
					cfg.HeapProfile = filepath.Join(*heapDir, fmt.Sprintf("heap-%dc-%dn.pb.gz", classes, n))
					cfg.HeapProfileWait = *heapWait
				}
				if *cpuDir != "" && cfg.Target == bench.TargetRelay {
					cfg.CPUProfile, cfg.CPUProfileFor = filepath.Join(*cpuDir, fmt.Sprintf("cpu-%dc-%dn.pb.gz", classes, n)), *cpuFor
				}
				res, err := bench.RunFanout(context.Background(), cfg)
				if err != nil {
					fmt.Fprintf(os.Stderr, "xds-bench: %s: %v\n", name, err)
					failed = true
					continue
				}
				fmt.Fprintf(os.Stderr, "xds-bench: %s: last %v (%v after sent), server CPU %v, RSS idle %.1f MiB%s\n",
					name, res.Last.Round(time.Millisecond), res.AfterSentLast.Round(time.Millisecond), res.ServerCPU, float64(res.ServerRSSIdle)/(1<<20), roundsNote(res))
				results = append(results, res)
			}
		}
	}
	proto := "sotw"
	if *delta {
		proto = "delta"
	}
	win := "grpc-go's window"
	if *window > 0 {
		win = fmt.Sprintf("window %d B", *window)
	}
	each := ""
	if *pace > 0 {
		each = fmt.Sprintf(", the classes %v apart", *pace)
	}
	if *rounds > 1 {
		each += fmt.Sprintf(" in each of %d rounds (time and CPU: the median round's)", *rounds)
	}
	fmt.Printf("%s clients, service %s, %d per connection, %s; classes %s, %d clusters, overlap %v; one cluster changed%s\n", proto, *service, *perConn, win, *classList, *clusters, *overlap, each)
	if err := writeTable(os.Stdout, results); err != nil {
		fail(err)
	}
	if slices.ContainsFunc(results, func(r *bench.FanoutResult) bool { return r.ControlPlane != nil }) {
		fmt.Printf("\ncontrol plane, where it is a process of its own (direct's server; the relay's with --control-plane-process): connection wave and update\n")
		if err := writeControlPlaneTable(os.Stdout, results); err != nil {
			fail(err)
		}
	}
	if *churn > 0 {
		fmt.Printf("\nchurn: %v EDS updates/s for %v, round robin over the classes\n", *churn, *duration)
		if err := writeChurnTable(os.Stdout, results); err != nil {
			fail(err)
		}
	}
	if *jsonOut != "" {
		b, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// relayBinary returns bin, or builds ./cmd/xds-relay into a temporary
// directory that cleanup removes.
func relayBinary(bin string) (path string, cleanup func(), err error) {
	if bin != "" {
		return bin, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "xds-bench")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	bin = filepath.Join(dir, "xds-relay")
	build := exec.Command("go", "build", "-o", bin, "./cmd/xds-relay")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building the relay (run from the repository root or pass --relay-bin): %w", err)
	}
	return bin, cleanup, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "xds-bench:", err)
	os.Exit(1)
}

// roundsNote lists each round's CPU when the update was repeated.
func roundsNote(res *bench.FanoutResult) string {
	if len(res.RoundsCPU) == 0 {
		return ""
	}
	parts := make([]string, len(res.RoundsCPU))
	for i, c := range res.RoundsCPU {
		parts[i] = c.Round(100 * time.Microsecond).String()
	}
	return " (median of rounds: CPU " + strings.Join(parts, " ") + ")"
}
