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
		n, classes int
		target     string
	}
	byKey := make(map[key]*bench.FanoutResult)
	var directs []string
	for _, r := range results {
		byKey[key{r.Clients, r.Classes, label(r)}] = r
		if r.Target == bench.TargetDirect && !slices.Contains(directs, label(r)) {
			directs = append(directs, label(r))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"N", "classes", "target", "first", "p50", "p99", "last", "last ÷ limit", "upstream sent", "last after sent", "after sent ÷ limit", "server CPU", "CPU ÷ limit"}
	for _, d := range directs {
		head = append(head, d+" CPU ÷ CPU")
	}
	head = append(head, "bytes/client", "MB in all", "RSS base", "RSS idle", "RSS idle − limit", "KiB/stream idle", "state MB (unique)", "upstream streams", "")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range results {
		limit := byKey[key{r.Clients, r.Classes, bench.TargetLimit}]
		row := []string{fmt.Sprint(r.Clients), fmt.Sprint(r.Classes), label(r), ms(r.First), ms(r.P50), ms(r.P99), ms(r.Last),
			ratio(r.Last, limit, func(l *bench.FanoutResult) time.Duration { return l.Last }),
			ms(r.UpstreamSent), ms(r.AfterSentLast),
			ratio(r.AfterSentLast, limit, func(l *bench.FanoutResult) time.Duration { return l.AfterSentLast }),
			ms(r.ServerCPU),
			ratio(r.ServerCPU, limit, func(l *bench.FanoutResult) time.Duration { return l.ServerCPU })}
		for _, d := range directs {
			row = append(row, inverse(r.ServerCPU, byKey[key{r.Clients, r.Classes, d}]))
		}
		row = append(row, fmt.Sprint(r.ResponseBytes), fmt.Sprintf("%.1f", float64(r.BytesTotal)/1e6),
			mib(r.ServerRSSBase), mib(r.ServerRSSIdle), rssOver(r, limit),
			fmt.Sprintf("%.1f", float64(r.ServerRSSIdle-r.ServerRSSBase)/1024/float64(r.Clients)),
			fmt.Sprintf("%.2f (%.2f)", float64(r.StateBytes)/1e6, float64(r.StateUniqueBytes)/1e6),
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

// rssOver is r's idle RSS above the limit run's ("-" without one).
func rssOver(r, limit *bench.FanoutResult) string {
	if limit == nil {
		return "-"
	}
	return fmt.Sprintf("%+.1fMiB", float64(r.ServerRSSIdle-limit.ServerRSSIdle)/(1<<20))
}

// writeChurnTable prints each run's churn latencies (raw and after the
// sender had sent the update) and, for the relay, their ratio to limit's.
func writeChurnTable(w io.Writer, results []*bench.FanoutResult) error {
	type key struct{ n, classes int }
	limits := make(map[key]*bench.ChurnResult)
	for _, r := range results {
		if r.Target == bench.TargetLimit && r.Churn != nil {
			limits[key{r.Clients, r.Classes}] = r.Churn
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join([]string{"N", "classes", "target", "updates", "rate/s", "receipts", "superseded",
		"p50", "p90", "p99", "max", "after sent p50", "p90", "p99", "max", "p99 ÷ limit", "server CPU", "CPU ÷ limit", ""}, "\t"))
	for _, r := range results {
		c := r.Churn
		if c == nil {
			continue
		}
		l := limits[key{r.Clients, r.Classes}]
		p99, cpu := "-", "-"
		if l != nil && l.AfterSentP99 > 0 && l.ServerCPU > 0 {
			p99 = fmt.Sprintf("%.2f×", float64(c.AfterSentP99)/float64(l.AfterSentP99))
			cpu = fmt.Sprintf("%.2f×", float64(c.ServerCPU)/float64(l.ServerCPU))
		}
		fmt.Fprintln(tw, strings.Join([]string{fmt.Sprint(r.Clients), fmt.Sprint(r.Classes), label(r),
			fmt.Sprint(c.Updates), fmt.Sprintf("%.1f", float64(c.Updates)/c.Duration.Seconds()),
			fmt.Sprint(c.Receipts), fmt.Sprint(c.Superseded),
			ms(c.P50), ms(c.P90), ms(c.P99), ms(c.Max),
			ms(c.AfterSentP50), ms(c.AfterSentP90), ms(c.AfterSentP99), ms(c.AfterSentMax), p99,
			ms(c.ServerCPU), cpu, ""}, "\t"))
	}
	return tw.Flush()
}

// writeControlPlaneTable prints the control plane's own figures where it is
// a process of its own (direct's server; the relay's with
// --control-plane-process): its streams, CPU over the connection wave and
// the update, RSS; and, on a relay row, how many times direct's control
// plane (the same cache, N and classes) spends more.
func writeControlPlaneTable(w io.Writer, results []*bench.FanoutResult) error {
	type key struct {
		n, classes int
		cache      string
	}
	directs := make(map[key]*bench.FanoutResult)
	for _, r := range results {
		if r.Target == bench.TargetDirect && r.ControlPlane != nil {
			directs[key{r.Clients, r.Classes, r.Cache}] = r
		}
	}
	times := func(direct, relay float64) string {
		if relay <= 0 || direct <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f×", direct/relay)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join([]string{"N", "classes", "target", "cp streams", "cp connect CPU", "cp update CPU",
		"cp RSS base", "cp RSS idle", "cp RSS after", "direct ÷ relay: connect CPU", "update CPU", "RSS idle", ""}, "\t"))
	for _, r := range results {
		cp := r.ControlPlane
		if cp == nil {
			continue
		}
		row := []string{fmt.Sprint(r.Clients), fmt.Sprint(r.Classes), label(r), fmt.Sprint(r.UpstreamStreams),
			ms(cp.ConnectCPU), ms(cp.UpdateCPU), mib(cp.RSSBase), mib(cp.RSSIdle), mib(cp.RSSAfter)}
		d := directs[key{r.Clients, r.Classes, r.Cache}]
		if r.Target == bench.TargetRelay && d != nil {
			row = append(row, times(float64(d.ControlPlane.ConnectCPU), float64(cp.ConnectCPU)),
				times(float64(d.ControlPlane.UpdateCPU), float64(cp.UpdateCPU)),
				times(float64(d.ControlPlane.RSSIdle), float64(cp.RSSIdle)))
		} else {
			row = append(row, "-", "-", "-")
		}
		fmt.Fprintln(tw, strings.Join(append(row, ""), "\t"))
	}
	return tw.Flush()
}
