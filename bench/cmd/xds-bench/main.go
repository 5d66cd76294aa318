// Command xds-bench measures the relay's fan-out: it runs a go-control-plane
// upstream, the relay as a child process and N raw ADS clients, pushes one
// CDS update and reports upstream-send → client-receive times and the
// relay's CPU and memory. See docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/xds-relay/xds-relay/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "soak" {
		os.Exit(soakMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "slow" {
		os.Exit(slowMain(os.Args[2:]))
	}
	target := flag.String("target", "relay", "relay: clients → relay (child process) → control plane; direct: clients → control plane")
	cacheKind := flag.String("cache", "snapshot", "the control plane's go-control-plane cache: snapshot or linear")
	clients := flag.Int("clients", 1000, "number of ADS clients (wildcard CDS)")
	classes := flag.Int("classes", 1, "number of node classes the clients are spread over")
	clusters := flag.Int("clusters", 1000, "clusters in each class's CDS state")
	delta := flag.Bool("delta", false, "clients speak incremental (delta) ADS instead of state of the world")
	upstreamDelta := flag.Bool("upstream-delta", false, "the relay speaks incremental (delta) ADS to the control plane")
	relayBin := flag.String("relay-bin", "", "xds-relay binary to measure (default: build ./cmd/xds-relay)")
	timeout := flag.Duration("timeout", 2*time.Minute, "time limit of each phase")
	jsonOut := flag.String("json", "", "write the raw result as JSON to this file")
	flag.Parse()

	bin := *relayBin
	if bin == "" && *target == "relay" {
		dir, err := os.MkdirTemp("", "xds-bench")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "xds-relay")
		build := exec.Command("go", "build", "-o", bin, "./cmd/xds-relay")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fail(fmt.Errorf("building the relay (run from the repository root or pass --relay-bin): %w", err))
		}
	}
	res, err := bench.RunFanout(context.Background(), bench.FanoutConfig{
		Target: *target, Cache: *cacheKind, RelayBin: bin, Clients: *clients, Classes: *classes, Clusters: *clusters, Delta: *delta, UpstreamDelta: *upstreamDelta, Timeout: *timeout,
		Log: func(f string, a ...any) { fmt.Fprintf(os.Stderr, "xds-bench: "+f+"\n", a...) },
	})
	if err != nil {
		fail(err)
	}
	proto := "sotw"
	if res.Delta {
		proto = "delta"
	}
	fmt.Printf("target=%s cache=%s clients=%d (%s) classes=%d clusters=%d\n", res.Target, res.Cache, res.Clients, proto, res.Classes, res.Clusters)
	fmt.Printf("upstream-send → client-receive: first %v  p50 %v  p99 %v  last %v\n",
		res.First.Round(time.Microsecond), res.P50.Round(time.Microsecond), res.P99.Round(time.Microsecond), res.Last.Round(time.Microsecond))
	fmt.Printf("update response: %d bytes per client, %.1f MB in all\n", res.ResponseBytes, float64(res.ResponseBytes)*float64(res.Clients)/1e6)
	if res.Target == "relay" {
		fmt.Printf("relay CPU during the update: %v\n", res.ServerCPU)
		fmt.Printf("relay RSS: %.1f MiB idle (all clients in sync), %.1f MiB after the update\n",
			float64(res.ServerRSSIdle)/(1<<20), float64(res.ServerRSSAfter)/(1<<20))
	}
	fmt.Printf("upstream: %d ADS streams, %d requests\n", res.UpstreamStreams, res.UpstreamRequests)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "xds-bench:", err)
	os.Exit(1)
}
