package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// writeMarkdown writes report.md: the figures, a table of every run and the
// relay's ratios to its baselines.
func (d *dataset) writeMarkdown(w io.Writer, figs []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fan-out benchmark report\n\nWritten by `xds-bench report` from %d runs. ", len(d.runs))
	b.WriteString("Times are from the moment the control plane was given the update to each client's receipt; ")
	b.WriteString("server CPU and RSS are the measured server's (the relay child process), \"—\" where the bench did not measure them.\n\n")
	i := 0
	for _, f := range figures {
		if f.when != nil && !f.when(d) {
			continue
		}
		fmt.Fprintf(&b, "![%s](%s)\n\n", f.title, figs[i])
		i++
	}
	d.writeRuns(&b)
	d.writeRatios(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (d *dataset) writeRuns(b *strings.Builder) {
	b.WriteString("## Runs\n\n")
	b.WriteString("| target | cache | protocol | N | clusters | classes | first | p50 | p99 | last | bytes per client | server CPU | RSS idle | KiB/stream | upstream streams | upstream requests |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range d.runs {
		rss := "—"
		if serverMeasured(r) {
			rss = fmt.Sprintf("%.1f MiB", float64(r.ServerRSSIdle)/(1<<20))
		}
		target, classes := r.Target, strconv.Itoa(r.Classes)
		if r.UpstreamDelta {
			target += ", delta upstream"
		}
		if r.Pace > 0 {
			classes += ", " + r.Pace.String() + " apart"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			target, r.Cache, protocol(r.Delta, r.Service), thousands(int64(r.Clients)), thousands(int64(r.Clusters)), classes,
			duration(r.First), duration(r.P50), duration(r.P99), duration(r.Last),
			thousands(int64(r.ResponseBytes)), value(cpuPerUpdate, r, "%.2f s"), rss, value(kibPerStream, r, "%.1f"),
			thousands(int64(r.UpstreamStreams)), thousands(int64(r.UpstreamRequests)))
	}
	b.WriteString("\n")
}

// baseline is what the relay is compared with.
type baseline struct {
	name  string
	match func(Run) bool
}

var baselines = []baseline{
	{"limit", func(r Run) bool { return r.Target == "limit" }},
	{"direct/snapshot", func(r Run) bool { return r.Target == "direct" && r.Cache == "snapshot" }},
	{"direct/linear", func(r Run) bool { return r.Target == "direct" && r.Cache == "linear" }},
}

// ratioMetric is a quantity compared between the relay and a baseline.
type ratioMetric struct {
	name   string
	metric func(Run) (float64, bool)
}

var ratioMetrics = []ratioMetric{{"last", timeToLast}, {"CPU", cpuPerUpdate}}

// writeRatios writes, for each scenario (protocol, N, ...) with a relay run
// and at least one baseline run, relay ÷ baseline of each metric.
func (d *dataset) writeRatios(b *strings.Builder) {
	var rows []string
	for _, s := range d.scenarios() {
		isRelay := func(r Run) bool { return r.Target == "relay" }
		if !d.has(s, isRelay) {
			continue
		}
		cells, any := []string{}, false
		for _, bl := range baselines {
			any = any || d.has(baselineOf(s), bl.match)
			for _, m := range ratioMetrics {
				cells = append(cells, d.ratio(s, isRelay, bl.match, m.metric))
			}
		}
		if any {
			rows = append(rows, fmt.Sprintf("| %s | %s | %s |\n", d.scenarioLabel(s), thousands(int64(s.Clients)), strings.Join(cells, " | ")))
		}
	}
	b.WriteString("## Relay vs baselines\n\n")
	if len(rows) == 0 {
		b.WriteString("No N has both a relay run and a limit or direct run.\n")
		return
	}
	b.WriteString("Each cell is relay ÷ baseline at the same protocol and N (the median of repeated runs): below 1× the relay is faster or cheaper. ")
	b.WriteString("\"—\": no such run, or it did not measure the quantity.\n\n")
	b.WriteString("| scenario | N |")
	sep := "|---|--:|"
	for _, bl := range baselines {
		for _, m := range ratioMetrics {
			fmt.Fprintf(b, " %s: relay ÷ %s |", m.name, bl.name)
			sep += "--:|"
		}
	}
	b.WriteString("\n" + sep + "\n")
	for _, r := range rows {
		b.WriteString(r)
	}
}

// scenarios lists every scenario of the data set in order.
func (d *dataset) scenarios() []scenario {
	var out []scenario
	seen := map[scenario]bool{}
	for _, k := range d.series {
		for _, n := range d.ns {
			s := k.scenario(n)
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func (d *dataset) has(s scenario, match func(Run) bool) bool {
	for _, r := range d.runs {
		if scenarioOf(r) == s && match(r) {
			return true
		}
	}
	return false
}

// medianOf is the median of metric over the runs of s that match; ok is
// false when none measured it.
func (d *dataset) medianOf(s scenario, match func(Run) bool, metric func(Run) (float64, bool)) (float64, bool) {
	var vs []float64
	for _, r := range d.runs {
		if scenarioOf(r) == s && match(r) {
			if v, ok := metric(r); ok {
				vs = append(vs, v)
			}
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	return median(vs), true
}

// ratio formats relay ÷ baseline as "1.20×", "—" when either side is
// missing or the baseline is zero.
func (d *dataset) ratio(s scenario, relay, base func(Run) bool, metric func(Run) (float64, bool)) string {
	num, ok1 := d.medianOf(s, relay, metric)
	den, ok2 := d.medianOf(baselineOf(s), base, metric)
	if !ok1 || !ok2 || den <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", num/den)
}

// duration is milliseconds below a second, seconds above.
func duration(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// value formats metric of r, "—" when r did not measure it.
func value(metric func(Run) (float64, bool), r Run, format string) string {
	v, ok := metric(r)
	if !ok {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// thousands formats n with comma separators: 1,250,074.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
