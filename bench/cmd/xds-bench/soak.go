package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/xds-relay/xds-relay/bench"
)

// The soak and slow subcommands: bounded runs of churn, client churn and
// upstream restarts with an end-state check (soak), and relay memory with
// clients that stop reading (slow). See docs/reliability.md.

const soakUsage = `usage: xds-bench soak [flags]

Runs the relay (child process) between a restartable go-control-plane
upstream and proxy-like ADS clients (SotW and delta; LDS/CDS wildcard,
RDS/EDS by name) for --duration, with resource churn, client reconnections
and upstream restarts together; then checks that every client holds exactly
the upstream's state. Exits 1 when a client differs.

`

const slowUsage = `usage: xds-bench slow [flags]

Runs the relay with --clients proxy-like clients and --slow clients that
subscribe to everything and never read, pushes changes at --rate for
--duration, and reports the relay's RSS over time, the slow clients
disconnected (slow_client) and the other clients' update latency, side by
side with a run without slow clients (--baseline).

`

// topologyFlags declares the synthetic configuration's flags.
func topologyFlags(fs *flag.FlagSet) func() bench.Topology {
	d := bench.DefaultTopology
	l := fs.Int("listeners", d.Listeners, "listeners per class (HTTP connection manager, routes by RDS)")
	r := fs.Int("routes", d.Routes, "route configurations per class")
	v := fs.Int("virtual-hosts", d.VirtualHosts, "virtual hosts per route configuration")
	c := fs.Int("clusters", d.Clusters, "EDS clusters per class")
	e := fs.Int("endpoints", d.Endpoints, "endpoints per cluster")
	return func() bench.Topology {
		return bench.Topology{Listeners: *l, Routes: *r, VirtualHosts: *v, Clusters: *c, Endpoints: *e}
	}
}

// churnFlags declares the churn pattern's flags.
func churnFlags(fs *flag.FlagSet, addRemove float64) func() bench.Churn {
	p := fs.String("churn", "fraction", "what one change touches: one, fraction or all (of the class's resources)")
	f := fs.Float64("churn-fraction", 0.05, "fraction of resources a change touches (--churn fraction)")
	a := fs.Float64("churn-add-remove", addRemove, "probability that a change also adds or removes an EDS cluster")
	return func() bench.Churn { return bench.Churn{Pattern: *p, Fraction: *f, AddRemove: *a} }
}

func logf(f string, a ...any) { fmt.Fprintf(os.Stderr, "xds-bench: "+f+"\n", a...) }

// relayBinFlag declares --relay-bin. The function it returns parses args
// and returns that binary, or one it built, with its cleanup; or the exit
// code, 2 for bad flags and 1 for a relay it could not build.
func relayBinFlag(fs *flag.FlagSet) func(args []string) (bin string, cleanup func(), code int) {
	relayBin := fs.String("relay-bin", "", "xds-relay binary (default: build ./cmd/xds-relay)")
	return func(args []string) (string, func(), int) {
		if err := fs.Parse(args); err != nil {
			return "", nil, 2
		}
		bin, cleanup, err := relayBinary(*relayBin)
		if err != nil {
			logf("%v", err)
			return "", nil, 1
		}
		return bin, cleanup, 0
	}
}

func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func soakMain(args []string) int {
	fs := flag.NewFlagSet("xds-bench soak", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), soakUsage); fs.PrintDefaults() }
	duration := fs.Duration("duration", 60*time.Second, "how long churn, client churn and restarts run")
	clients := fs.Int("clients", 200, "proxy clients")
	classes := fs.Int("classes", 3, "node classes the clients are spread over")
	deltaShare := fs.Float64("delta-share", 0.5, "fraction of clients speaking delta ADS (the rest SotW)")
	topo := topologyFlags(fs)
	churn := churnFlags(fs, 0.2)
	churnRate := fs.Float64("churn-rate", 5, "changes a second (each applied to every class)")
	clientChurn := fs.Float64("client-churn-rate", 10, "client reconnections a second (a random client drops its connection and reconnects)")
	restartEvery := fs.Duration("restart-every", 10*time.Second, "upstream restart period (0: none)")
	maxDown := fs.Duration("max-down", time.Second, "an upstream restart is down for a random [max-down/4, max-down], one change made meanwhile")
	converge := fs.Duration("converge-timeout", 60*time.Second, "bound of each wait for every client to hold the upstream's state")
	upstreamDelta := fs.Bool("upstream-delta", false, "the relay speaks incremental (delta) ADS to the control plane")
	config := fs.String("config", "", "relay configuration file (--config of xds-relay)")
	parse := relayBinFlag(fs)
	jsonOut := fs.String("json", "", "write the raw result as JSON to this file")
	bin, cleanup, code := parse(args)
	if code != 0 {
		return code
	}
	defer cleanup()
	res, err := bench.RunSoak(context.Background(), bench.SoakConfig{
		RelayBin: bin, UpstreamDelta: *upstreamDelta, ConfigFile: *config,
		Duration: *duration, Clients: *clients, Classes: *classes, DeltaShare: *deltaShare,
		Topology: topo(), Churn: churn(), ChurnRate: *churnRate, ClientChurnRate: *clientChurn,
		RestartEvery: *restartEvery, MaxDown: *maxDown, ConvergeTimeout: *converge, Log: logf,
	})
	if err != nil {
		logf("%v", err)
		return 1
	}
	lo, p50, hi := res.ConvergenceStats()
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Printf("soak: %v, %d clients (%d delta, %d SotW) over %d classes\n", ms(res.Duration), res.Clients, res.DeltaClients, res.Clients-res.DeltaClients, res.Classes)
	fmt.Printf("updates: %d snapshots published; %d responses received by clients\n", res.Updates, res.Responses)
	fmt.Printf("client reconnects: %d (churn); client streams ended by the relay: %d\n", res.ClientReconnects, res.ClientDrops)
	fmt.Printf("upstream restarts: %d; convergence after the upstream returned: min %v  p50 %v  max %v (not converged: %d)\n", res.UpstreamRestarts, ms(lo), ms(p50), ms(hi), res.NotConverged)
	fmt.Printf("initial sync %v; final sync after churn stopped %v\n", ms(res.InitialSync), ms(res.FinalSync))
	fmt.Printf("relay at the end: CPU %v, RSS %.1f MiB\n", res.RelayCPU, float64(res.RelayRSS)/(1<<20))
	fmt.Printf("upstream ADS streams per incarnation: %v (want %d each, plus %d restarts the relay chose)\n", res.UpstreamStreams, res.Classes, res.ChosenRestarts)
	if err := writeJSON(*jsonOut, res); err != nil {
		logf("%v", err)
		return 1
	}
	streams := res.StreamsProblem()
	if len(res.Mismatches) > 0 || streams != "" {
		for _, m := range res.Mismatches {
			fmt.Println("MISMATCH", m)
		}
		if streams != "" {
			fmt.Println("STREAMS", streams)
		}
		fmt.Println("end state: FAIL")
		return 1
	}
	fmt.Println("end state: every client holds exactly the upstream's state")
	return 0
}

func slowMain(args []string) int {
	fs := flag.NewFlagSet("xds-bench slow", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), slowUsage); fs.PrintDefaults() }
	clients := fs.Int("clients", 1000, "proxy clients that keep up")
	slow := fs.Int("slow", 100, "clients that subscribe to everything and never read")
	classes := fs.Int("classes", 1, "node classes")
	deltaShare := fs.Float64("delta-share", 0.5, "fraction of the keeping-up clients speaking delta ADS")
	topo := topologyFlags(fs)
	churn := churnFlags(fs, 0)
	rate := fs.Float64("rate", 5, "changes a second (each waits until the keeping-up clients hold it)")
	duration := fs.Duration("duration", 60*time.Second, "how long changes flow")
	untilGone := fs.Bool("until-stalled-gone", false, "go on changing past --duration (for at most --timeout) until every stalled client is disconnected")
	idle := fs.Duration("idle", 5*time.Second, "measured before and after the changes")
	maxCollapses := fs.Int("max-collapses", 10, "the relay's limits.max_collapses (-1: never disconnect)")
	baseline := fs.Bool("baseline", true, "first run the same without slow clients, for comparison")
	timeout := fs.Duration("timeout", 60*time.Second, "bound of each wait")
	parse := relayBinFlag(fs)
	jsonOut := fs.String("json", "", "write the raw results as JSON to this file")
	bin, cleanup, code := parse(args)
	if code != 0 {
		return code
	}
	defer cleanup()
	dir, err := os.MkdirTemp("", "xds-bench-slow")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer os.RemoveAll(dir)
	config := filepath.Join(dir, "relay.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, "limits:\n  max_collapses: %d\n", *maxCollapses), 0o644); err != nil {
		logf("%v", err)
		return 1
	}
	runs := []int{*slow}
	if *baseline && *slow > 0 {
		runs = []int{0, *slow}
	}
	var results []*bench.SlowResult
	for _, k := range runs {
		res, err := bench.RunSlow(context.Background(), bench.SlowConfig{
			RelayBin: bin, ConfigFile: config, Clients: *clients, Stalled: k, Classes: *classes, DeltaShare: *deltaShare,
			Topology: topo(), Churn: churn(), Rate: *rate, Duration: *duration, UntilStalledGone: *untilGone, Idle: *idle, Timeout: *timeout, Log: logf,
		})
		if err != nil {
			logf("%v", err)
			return 1
		}
		results = append(results, res)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	ms := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	fmt.Println("clients | slow | changes | latency p50 / p99 / max | relay RSS before / peak / after | slow disconnected (metric) | collapses | relay CPU | drops")
	for _, r := range results {
		fmt.Printf("%d | %d | %d | %v / %v / %v | %s / %s / %s | %d (%v) | %v | %v | %d\n",
			r.Clients, r.Stalled, r.Changes, ms(r.Quantile(0.5)), ms(r.Quantile(0.99)), ms(r.Quantile(1)),
			mib(r.RSSBefore), mib(r.RSSPeak), mib(r.RSSAfter), r.StalledDisconnected, r.SlowDisconnects, r.Collapses, r.RelayCPU, r.ClientDrops)
	}
	last := results[len(results)-1]
	fmt.Print("relay RSS over time (s: MiB):")
	for i, s := range last.RSS {
		if i%4 == 0 {
			fmt.Printf(" %.0f:%.0f", s.At.Seconds(), float64(s.RSS)/(1<<20))
		}
	}
	fmt.Println()
	if err := writeJSON(*jsonOut, results); err != nil {
		logf("%v", err)
		return 1
	}
	return 0
}
