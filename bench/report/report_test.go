package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// svgDoc is what the tests read from a figure: its texts and stroked paths.
type svgDoc struct {
	texts []string
	paths []svgPath
}

type svgPath struct{ d, style string }

func readSVG(t *testing.T, file string) svgDoc {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var doc svgDoc
	dec := xml.NewDecoder(f)
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", file, err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "text":
				inText = true
				doc.texts = append(doc.texts, "")
			case "path":
				var p svgPath
				for _, a := range el.Attr {
					switch a.Name.Local {
					case "d":
						p.d = a.Value
					case "style":
						p.style = a.Value
					}
				}
				doc.paths = append(doc.paths, p)
			}
		case xml.EndElement:
			if el.Name.Local == "text" {
				inText = false
			}
		case xml.CharData:
			if inText {
				doc.texts[len(doc.texts)-1] += string(el)
			}
		}
	}
	return doc
}

func (doc svgDoc) hasText(s string) bool { return slices.Contains(doc.texts, s) }

// stroked returns the paths stroked in colour c.
func (doc svgDoc) stroked(c color.Color) []svgPath {
	r, g, b, _ := c.RGBA()
	want := fmt.Sprintf("stroke:#%02X%02X%02X", r>>8, g>>8, b>>8)
	var out []svgPath
	for _, p := range doc.paths {
		if strings.Contains(p.style+";", want+";") {
			out = append(out, p)
		}
	}
	return out
}

// polyline reports whether p is an open polyline of n vertices (M then n-1
// L): a data line. Glyphs are arcs, closed shapes or two-vertex strokes.
func (p svgPath) polyline(n int) bool {
	return !strings.ContainsAny(p.d, "AZQC") && strings.Count(p.d, "M") == 1 && strings.Count(p.d, "L") == n-1
}

func writeReport(t *testing.T, runs []Run, opts Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "report")
	if err := Write(dir, runs, opts); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readMarkdown returns the report.md that writeReport wrote into dir.
func readMarkdown(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFiguresHaveTitlesAxesAndOneLinePerSeries(t *testing.T) {
	runs := sweep()
	dir := writeReport(t, runs, Options{})
	d := newDataset(runs)

	// The series, in colour order, and their points against N.
	wantSeries := []struct {
		label  string
		points int // runs (CDF) or Ns
	}{
		{"relay sotw", 4},
		{"relay delta", 1},
		{"limit sotw", 2},
		{"direct/linear sotw", 1},
		{"direct/snapshot sotw", 1},
	}
	if len(d.series) != len(wantSeries) {
		t.Fatalf("series = %v, want %d", d.series, len(wantSeries))
	}
	for i, w := range wantSeries {
		if got := d.label(d.series[i]); got != w.label {
			t.Errorf("series %d label = %q, want %q", i, got, w.label)
		}
	}

	t.Run("cdf", func(t *testing.T) {
		doc := readSVG(t, filepath.Join(dir, "latency-cdf.svg"))
		for _, s := range []string{latencyCDFTitle, latencyAxis, fractionAxis, "relay sotw N=3000", "limit sotw N=1", "direct/linear sotw N=3000"} {
			if !doc.hasText(s) {
				t.Errorf("no text %q in %v", s, doc.texts)
			}
		}
		for i, w := range wantSeries {
			// One curve per run and its legend thumbnail.
			if got := len(doc.stroked(seriesColor(i))); got != 2*w.points {
				t.Errorf("%s: %d paths in its colour, want %d (a curve and a legend line per run)", w.label, got, 2*w.points)
			}
		}
		// Each relay SotW curve starts at 0 and has a point per client, up
		// to maxCDFPoints: N=1000 and N=3000 are sampled.
		for _, c := range []struct{ points, curves int }{{101, 1}, {301, 1}, {maxCDFPoints + 1, 2}} {
			n := 0
			for _, p := range doc.stroked(seriesColor(0)) {
				if p.polyline(c.points) {
					n++
				}
			}
			if n != c.curves {
				t.Errorf("%d relay sotw curves of %d points, want %d", n, c.points, c.curves)
			}
		}
	})

	for _, tc := range []struct {
		file, title, yAxis string
		measured           []int // points per series, -1: not drawn
		extra              []string
	}{
		{"time-to-last.svg", timeToLastTitle, timeToLastAxis, []int{4, 1, 2, 1, 1}, nil},
		{"memory-per-stream.svg", memoryTitle, memoryAxis, []int{4, 1, 2, 1, 1}, []string{streamTargetName}},
		{"cpu.svg", cpuTitle, cpuAxis, []int{4, 1, 2, 1, 1}, nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			doc := readSVG(t, filepath.Join(dir, tc.file))
			for _, s := range append([]string{tc.title, clientsAxis, tc.yAxis, "1", "100", "300", "1000", "3000"}, tc.extra...) {
				if !doc.hasText(s) {
					t.Errorf("no text %q in %v", s, doc.texts)
				}
			}
			for i, pts := range tc.measured {
				label := wantSeries[i].label
				if doc.hasText(label) != (pts > 0) {
					t.Errorf("legend has %q: %v, want %v", label, doc.hasText(label), pts > 0)
				}
				lines := 0
				for _, p := range doc.stroked(seriesColor(i)) {
					if p.polyline(pts) {
						lines++
					}
				}
				switch {
				case pts >= 3 && lines != 1:
					t.Errorf("%s: %d lines of %d points, want 1", label, lines, pts)
				case pts == 1 && len(doc.stroked(seriesColor(i))) == 0:
					t.Errorf("%s: no glyph for its one point", label)
				}
			}
			if got := len(doc.stroked(seriesColor(len(wantSeries)))); got != 0 {
				t.Errorf("%d paths in the colour of a series that does not exist", got)
			}
			ref := len(doc.stroked(referenceColor))
			if want := len(tc.extra) * 2; ref != want {
				t.Errorf("%d reference-line paths, want %d (line and legend)", ref, want)
			}
		})
	}
}

func TestReportTableAndRatios(t *testing.T) {
	dir := writeReport(t, sweep(), Options{})
	md := readMarkdown(t, dir)
	for _, want := range []string{
		"![Latency CDF](latency-cdf.svg)",
		"![Time to last client vs N](time-to-last.svg)",
		"![Server memory per idle stream vs N](memory-per-stream.svg)",
		"![Server CPU per update vs N](cpu.svg)",
		// Relay, N=3000: 1.2 s and 0.30 s vs limit 1.0 s, 0.25 s; direct
		// snapshot 4 s, 0.9 s; direct linear 6 s, 1.5 s.
		"| sotw | 3,000 | 1.20× | 1.20× | 0.30× | 0.33× | 0.20× | 0.20× |",
		// Relay runs, 130 MiB idle over 3,000 streams is 44.4 KiB each.
		"| relay | snapshot | sotw | 3,000 | 1,000 | 1 | 60.0 ms | 630.2 ms | 1.19 s | 1.20 s | 125,074 | 0.30 s | 130.0 MiB | 44.4 | 1 | 3 |",
		"| relay | snapshot | delta | 1,000 | 1,000 | 1 | 37.0 ms |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	// Scenarios with a relay run but no baseline have no ratio row.
	_, ratios, _ := strings.Cut(md, "## Relay vs baselines")
	for _, absent := range []string{"| sotw | 1,000 |", "| delta | 1,000 |", "| sotw | 1 |"} {
		if strings.Contains(ratios, absent) {
			t.Errorf("report.md has a ratio row %q without a baseline", absent)
		}
	}
	if got := strings.Count(md, "\n| relay |") + strings.Count(md, "\n| limit |") + strings.Count(md, "\n| direct |"); got != len(sweep()) {
		t.Errorf("%d run rows, want %d", got, len(sweep()))
	}
}

func TestMemoryPerStreamSubtractsTheBase(t *testing.T) {
	r := run("relay", "snapshot", true, 1000, 0, 0, 0, 43*mib)
	if got, _ := kibPerStream(r); got != 43*1024/1000.0 {
		t.Errorf("no base: %v KiB/stream, want idle/N", got)
	}
	r.ServerRSSBase = 27 * mib
	if got, _ := kibPerStream(r); got != 16*1024/1000.0 {
		t.Errorf("base 27 MiB: %v KiB/stream, want (idle-base)/N", got)
	}
	if _, ok := kibPerStream(run("direct", "linear", true, 1000, 0, 0, 0, 0)); ok {
		t.Error("direct target (server not measured) has a memory figure")
	}
}

// The output depends on the set of runs only, not on their order; the
// server's unmeasured CPU is not drawn as 0.
func TestDeterministic(t *testing.T) {
	runs := sweep()
	a := writeReport(t, runs, Options{})
	slices.Reverse(runs)
	b := writeReport(t, runs, Options{})
	for _, f := range []string{"latency-cdf.svg", "time-to-last.svg", "memory-per-stream.svg", "cpu.svg", ReportFile} {
		x, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs when the input is reversed", f)
		}
	}
}

func TestUnmeasuredServerIsLeftOut(t *testing.T) {
	ms := time.Millisecond
	runs := []Run{
		run("direct", "linear", true, 100, 40*ms, 90*ms, 0, 0),
		run("direct", "linear", true, 1000, 41*ms, 1770*ms, 0, 0),
	}
	dir := writeReport(t, runs, Options{PNG: true})
	for _, f := range []string{"cpu.svg", "memory-per-stream.svg"} {
		doc := readSVG(t, filepath.Join(dir, f))
		if n := len(doc.stroked(seriesColor(0))); n != 0 {
			t.Errorf("%s: %d paths for a server that was not measured", f, n)
		}
		if !slices.ContainsFunc(doc.texts, func(s string) bool { return strings.HasSuffix(s, noDataSuffix) }) {
			t.Errorf("%s: title does not say no run measured it: %v", f, doc.texts)
		}
	}
	doc := readSVG(t, filepath.Join(dir, "time-to-last.svg"))
	if !doc.hasText("direct/linear delta") {
		t.Errorf("time to last lacks the direct series: %v", doc.texts)
	}
	md := readMarkdown(t, dir)
	if !strings.Contains(md, "No N has both a relay run") {
		t.Errorf("report.md without relay runs:\n%s", md)
	}
	for _, f := range figures {
		if f.when != nil && !f.when(newDataset(runs)) {
			continue
		}
		pf, err := os.Open(filepath.Join(dir, f.file+".png"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = png.Decode(pf)
		pf.Close()
		if err != nil {
			t.Errorf("%s.png: %v", f.file, err)
		}
	}
}

func TestWriteNoRuns(t *testing.T) {
	if err := Write(t.TempDir(), nil, Options{}); err == nil {
		t.Error("Write of no runs succeeded")
	}
}

// Repeated runs: one CDF curve per series and N (the median run's), the
// median in the figures against N and in the ratios; the table lists every
// run.
func TestRepeatedRunsUseTheMedian(t *testing.T) {
	ms := time.Millisecond
	var runs []Run
	for _, last := range []time.Duration{900, 1200, 5000} { // median 1.2 s
		runs = append(runs, run("relay", "snapshot", false, 3000, 60*ms, last*ms, 300*ms, 130*mib))
	}
	runs = append(runs,
		run("limit", "snapshot", false, 3000, 40*ms, 900*ms, 250*ms, 90*mib),
		run("limit", "snapshot", false, 3000, 40*ms, 1100*ms, 250*ms, 90*mib)) // median 1.0 s
	dir := writeReport(t, runs, Options{})

	doc := readSVG(t, filepath.Join(dir, "latency-cdf.svg"))
	for i, want := range []int{1, 1} {
		if got := len(doc.stroked(seriesColor(i))); got != 2*want {
			t.Errorf("series %d: %d CDF paths, want %d (a curve and its legend line)", i, got, 2*want)
		}
	}
	if !doc.hasText("relay sotw N=3000") || !doc.hasText("limit sotw N=3000") {
		t.Errorf("CDF legend: %v", doc.texts)
	}
	md := readMarkdown(t, dir)
	if !strings.Contains(md, "| sotw | 3,000 | 1.20× | 1.20× |") {
		t.Errorf("ratio of medians missing:\n%s", md)
	}
	if got := strings.Count(md, "\n| relay |"); got != 3 {
		t.Errorf("%d relay rows, want every run (3)", got)
	}
}

// A sweep over classes gets the figures against the class count: one line
// per target and N, a point per class count; without one it gets none.
func TestClassesFigures(t *testing.T) {
	ms := time.Millisecond
	var runs []Run
	for i, classes := range []int{1, 10, 100} {
		for _, target := range []string{"relay", "limit"} {
			r := run(target, "snapshot", false, 1000, 10*ms, time.Duration(300+100*i)*ms, 200*ms, 100*mib)
			r.Classes, r.AfterSentLast = classes, time.Duration(200+100*i)*ms
			runs = append(runs, r)
		}
	}
	dir := writeReport(t, runs, Options{})
	for _, f := range []struct{ file, title string }{{"classes.svg", classesTitle}, {"classes-cpu.svg", classesCPUTitle}} {
		doc := readSVG(t, filepath.Join(dir, f.file))
		if !doc.hasText(f.title) || !doc.hasText(classesAxis) || !doc.hasText("relay sotw N=1000") || !doc.hasText("100") {
			t.Errorf("%s: texts %v", f.file, doc.texts)
		}
		for i := range 2 {
			if !slices.ContainsFunc(doc.stroked(seriesColor(i)), func(p svgPath) bool { return p.polyline(3) }) {
				t.Errorf("%s: series %d has no line through its 3 class counts", f.file, i)
			}
		}
	}
	md := readMarkdown(t, dir)
	if !strings.Contains(md, "(classes.svg)") {
		t.Errorf("report.md does not show the classes figure:\n%s", md)
	}

	one := writeReport(t, runs[:2], Options{})
	if _, err := os.Stat(filepath.Join(one, "classes.svg")); !os.IsNotExist(err) {
		t.Errorf("classes.svg written for one class count: %v", err)
	}
}

// Runs of another overlap are another series, named by their overlap.
func TestOverlapIsASeries(t *testing.T) {
	ms := time.Millisecond
	a := run("relay", "snapshot", false, 1000, 10*ms, 300*ms, 200*ms, 100*mib)
	b := a
	b.Unique, b.Last = 0.1, 900*ms
	d := newDataset([]Run{a, b})
	if len(d.series) != 2 {
		t.Fatalf("%d series, want 2", len(d.series))
	}
	if got := d.label(keyOf(b)); got != "relay sotw, overlap 0.9" {
		t.Errorf("label %q, want the overlap named", got)
	}
}

// Paced runs and a relay over a delta upstream are series of their own, and
// the relay is compared with the baseline at its own pace: the limit has no
// upstream, so a relay over either protocol is compared with the same limit.
func TestPaceAndUpstreamProtocolAreSeries(t *testing.T) {
	ms := time.Millisecond
	paced := func(r Run) Run { r.Pace = 3 * ms; return r }
	overDelta := func(r Run) Run { r.UpstreamDelta = true; return r }
	runs := []Run{
		run("relay", "snapshot", false, 1000, 10*ms, 300*ms, 1800*ms, 100*mib),
		paced(run("relay", "snapshot", false, 1000, 10*ms, 300*ms, 1200*ms, 100*mib)),
		overDelta(run("relay", "snapshot", false, 1000, 10*ms, 300*ms, 1500*ms, 100*mib)),
		paced(overDelta(run("relay", "snapshot", false, 1000, 10*ms, 300*ms, 1100*ms, 100*mib))),
		run("limit", "", false, 1000, 10*ms, 300*ms, 1000*ms, 100*mib),
		paced(run("limit", "", false, 1000, 10*ms, 300*ms, 1000*ms, 100*mib)),
	}
	d := newDataset(runs)
	if len(d.series) != len(runs) {
		t.Fatalf("%d series, want %d", len(d.series), len(runs))
	}
	for i, want := range map[int]string{
		0: "relay sotw, unpaced",
		3: "relay sotw (delta upstream), classes 3ms apart",
		5: "limit sotw, classes 3ms apart",
	} {
		if got := d.label(keyOf(runs[i])); got != want {
			t.Errorf("label %q, want %q", got, want)
		}
	}
	md := readMarkdown(t, writeReport(t, runs, Options{}))
	_, ratios, _ := strings.Cut(md, "## Relay vs baselines")
	for _, want := range []string{
		"| sotw, unpaced | 1,000 | 1.00× | 1.80× |",
		"| sotw, classes 3ms apart | 1,000 | 1.00× | 1.20× |",
		"| sotw (delta upstream), unpaced | 1,000 | 1.00× | 1.50× |",
		"| sotw (delta upstream), classes 3ms apart | 1,000 | 1.00× | 1.10× |",
	} {
		if !strings.Contains(ratios, want) {
			t.Errorf("ratios lack %q:\n%s", want, ratios)
		}
	}
	for _, want := range []string{"| relay, delta upstream | snapshot | sotw | 1,000 | 1,000 | 1, 3ms apart |", "| limit |  | sotw | 1,000 | 1,000 | 1 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("runs table lacks %q:\n%s", want, md)
		}
	}
}
