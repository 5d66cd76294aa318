package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xds-relay/xds-relay/bench"
)

// label names a result's target as the sweep's --target spells it.
func label(r *bench.FanoutResult) string {
	if r.Target == bench.TargetRelay || r.Target == bench.TargetDirect {
		return r.Target + ":" + r.Cache
	}
	return r.Target
}

// writeTable prints the results side by side, one row per run, with each
// run's time to last client and server CPU as multiples of the limit
// target's at the same N, and how many times lower its CPU is than each
// direct target's.
func writeTable(w io.Writer, results []*bench.FanoutResult) error {
	type key struct {
		n      int
		target string
	}
	byKey := make(map[key]*bench.FanoutResult)
	var directs []string
	for _, r := range results {
		byKey[key{r.Clients, label(r)}] = r
		if r.Target == bench.TargetDirect && !slices.Contains(directs, label(r)) {
			directs = append(directs, label(r))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"N", "target", "first", "p50", "p99", "last", "last ÷ limit", "server CPU", "CPU ÷ limit"}
	for _, d := range directs {
		head = append(head, d+" CPU ÷ CPU")
	}
	head = append(head, "bytes/client", "MB in all", "RSS base", "RSS idle", "KiB/stream idle", "upstream streams", "")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range results {
		limit := byKey[key{r.Clients, bench.TargetLimit}]
		row := []string{fmt.Sprint(r.Clients), label(r), ms(r.First), ms(r.P50), ms(r.P99), ms(r.Last),
			ratio(r.Last, limit, func(l *bench.FanoutResult) time.Duration { return l.Last }),
			ms(r.ServerCPU),
			ratio(r.ServerCPU, limit, func(l *bench.FanoutResult) time.Duration { return l.ServerCPU })}
		for _, d := range directs {
			row = append(row, inverse(r.ServerCPU, byKey[key{r.Clients, d}]))
		}
		row = append(row, fmt.Sprint(r.ResponseBytes), fmt.Sprintf("%.1f", float64(r.BytesTotal)/1e6),
			mib(r.ServerRSSBase), mib(r.ServerRSSIdle),
			fmt.Sprintf("%.1f", float64(r.ServerRSSIdle-r.ServerRSSBase)/1024/float64(r.Clients)),
			fmt.Sprint(r.UpstreamStreams), "")
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
func mib(b int64) string        { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// ratio is v as a multiple of the limit run's figure ("-" without one).
func ratio(v time.Duration, limit *bench.FanoutResult, of func(*bench.FanoutResult) time.Duration) string {
	if limit == nil || of(limit) <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", float64(v)/float64(of(limit)))
}

// inverse is how many times lower cpu is than the direct run's CPU.
func inverse(cpu time.Duration, direct *bench.FanoutResult) string {
	if direct == nil || cpu <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f×", float64(direct.ServerCPU)/float64(cpu))
}
