package report

import (
	"time"
)

// run builds a realistic result: n clients whose latencies spread evenly
// from first to last, 1,000 clusters (125,074 bytes per SotW response, 235
// per delta one), and the server's CPU and idle RSS (0: not measured, as for
// the direct target).
func run(target, cache string, delta bool, n int, first, last time.Duration, cpu time.Duration, rssIdle int64) Run {
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = first
		if n > 1 {
			lat[i] = first + (last-first)*time.Duration(i)/time.Duration(n-1)
		}
	}
	bytes := 125074
	if delta {
		bytes = 235
	}
	streams, requests := 1, 3
	if target == "direct" {
		streams, requests = n, 3*n-1
	}
	r := Run{
		Target: target, Cache: cache, Clients: n, Classes: 1, Clusters: 1000, Delta: delta,
		First: first, P50: lat[len(lat)/2], P99: lat[len(lat)*99/100], Last: last,
		ResponseBytes: bytes, UpstreamStreams: streams, UpstreamRequests: requests, Latencies: lat,
	}
	if rssIdle > 0 {
		r.ServerCPU = cpu
		r.ServerRSSIdle = rssIdle
		r.ServerRSSAfter = rssIdle + 2<<20
	}
	return r
}

const mib = 1 << 20

// sweep is a sweep like the one in bench/results/sweep-n100-10k: the
// relay over four Ns (SotW), one delta relay run, the limit at N=1 and
// N=3000, and the direct targets at N=3000. At N=3000: relay last 1.2 s vs limit 1.0 s, CPU
// 0.30 s vs 0.25 s, vs direct/snapshot CPU 0.90 s and direct/linear last
// 6 s, CPU 1.5 s.
func sweep() []Run {
	ms := time.Millisecond
	return []Run{
		run("relay", "snapshot", false, 100, 20*ms, 35*ms, 10*ms, 30*mib),
		run("relay", "snapshot", false, 300, 30*ms, 95*ms, 30*ms, 36*mib),
		run("relay", "snapshot", false, 1000, 50*ms, 273*ms, 110*ms, 63*mib),
		run("relay", "snapshot", false, 3000, 60*ms, 1200*ms, 300*ms, 130*mib),
		run("relay", "snapshot", true, 1000, 37*ms, 96*ms, 80*ms, 78*mib),
		run("limit", "snapshot", false, 1, 2*ms, 2*ms, 0, 10*mib),
		run("limit", "snapshot", false, 3000, 40*ms, 1000*ms, 250*ms, 90*mib),
		run("direct", "snapshot", false, 3000, 900*ms, 4000*ms, 900*ms, 200*mib),
		run("direct", "linear", false, 3000, 800*ms, 6000*ms, 1500*ms, 220*mib),
	}
}
