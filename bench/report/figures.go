package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Figure files without extension, relative to the report directory
// (report.md links them).
const (
	latencyCDFFile      = "latency-cdf"
	timeToLastFile      = "time-to-last"
	memoryPerStreamFile = "memory-per-stream"
	cpuFile             = "cpu"
	classesFile         = "classes"
	classesCPUFile      = "classes-cpu"
)

// Figure titles and axis labels (the tests look for them in the SVGs).
const (
	latencyCDFTitle  = "Update latency CDF: upstream send → client receipt"
	latencyAxis      = "latency (ms, log scale)"
	fractionAxis     = "fraction of clients"
	timeToLastTitle  = "Time to the last client vs N"
	timeToLastAxis   = "time to last client (s, log scale)"
	memoryTitle      = "Server memory per idle stream vs N"
	memoryAxis       = "RSS per stream (KiB, log scale)"
	cpuTitle         = "Server CPU per update vs N"
	cpuAxis          = "server CPU per update (s)"
	clientsAxis      = "N (clients, log scale)"
	classesTitle     = "Time to the last client vs classes, the upstream's sending taken out"
	classesCPUTitle  = "Server CPU per update vs classes"
	classesAxis      = "node classes (log scale)"
	noDataSuffix     = " (no run measured it)"
	streamTargetKiB  = 16
	streamTargetName = "16 KiB/stream target"
)

// maxCDFPoints bounds the clients drawn per CDF curve: beyond it the curve
// is sampled at evenly spaced ranks (the y error stays under 1/maxCDFPoints).
const maxCDFPoints = 400

// referenceColor draws reference lines; no series (nor the grid) uses it.
var referenceColor = color.RGBA{R: 64, G: 64, B: 64, A: 255}

// seriesColor and seriesGlyph give series i the same look in every figure.
func seriesColor(i int) color.Color {
	return plotutil.DarkColors[i%len(plotutil.DarkColors)]
}

func seriesGlyph(i int) draw.GlyphDrawer {
	return plotutil.DefaultGlyphShapes[i%len(plotutil.DefaultGlyphShapes)]
}

// nDashes gives the i-th N its dash pattern in the CDF.
func nDashes(i int) []vg.Length { return plotutil.DefaultDashes[i%len(plotutil.DefaultDashes)] }

// latencyCDF draws one curve per series and N, of the run with the median
// time to last client when the run was repeated: colour by series, dash by N.
func (d *dataset) latencyCDF() (*chart, error) {
	c := newChart(latencyCDFTitle, latencyAxis, fractionAxis)
	lo, hi := math.Inf(1), 0.0
	for _, r := range d.medianRuns() {
		if len(r.Latencies) == 0 {
			continue
		}
		xys := cdfPoints(r)
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("cdf of %s: %w", d.runLabel(r), err)
		}
		l.Color = seriesColor(d.index[keyOf(r)])
		l.Dashes = nDashes(indexOf(d.ns, r.Clients))
		l.Width = vg.Points(1.25)
		c.plot.Add(l)
		c.add(d.runLabel(r), l)
		lo, hi = min(lo, r.Latencies[0].Seconds()*1e3), max(hi, r.Latencies[len(r.Latencies)-1].Seconds()*1e3)
	}
	if hi == 0 {
		c.plot.Title.Text += noDataSuffix
	}
	c.plot.X.Tick.Marker = logTicks125{}
	c.plot.X.Min, c.plot.X.Max = logRange(max(lo, minLatencyMS), hi, 1.1)
	c.plot.Y.Min, c.plot.Y.Max = 0, 1
	return c, nil
}

// minLatencyMS keeps a CDF on the log axis if a latency were 0.
const minLatencyMS = 0.001

// cdfPoints is (log10 of the latency in ms, fraction of clients at or below
// it) from 0
// at the first client's latency, then at most maxCDFPoints clients, always
// including the first and the last.
func cdfPoints(r Run) plotter.XYs {
	lat := r.Latencies
	n := len(lat)
	m := min(n, maxCDFPoints)
	ms := func(i int) float64 { return lg(max(float64(lat[i])/1e6, minLatencyMS)) }
	xys := make(plotter.XYs, 0, m+1)
	xys = append(xys, plotter.XY{X: ms(0), Y: 0})
	for k := 0; k < m; k++ {
		i := k
		if m < n {
			i = int(math.Round(float64(k) * float64(n-1) / float64(m-1)))
		}
		xys = append(xys, plotter.XY{X: ms(i), Y: float64(i+1) / float64(n)})
	}
	return xys
}

func indexOf(ns []int, n int) int {
	for i, v := range ns {
		if v == n {
			return i
		}
	}
	return -1
}

// versusN draws one line with glyphs per series of metric against N (log
// scale, a tick at every N of the data set); a series with one N is a glyph.
// With logY, values ≤ 0 are left out. ref > 0 adds a horizontal reference
// line named refName.
func (d *dataset) versusN(title, yAxis string, metric func(Run) (float64, bool), logY bool, ref float64, refName string) (*chart, error) {
	c := newChart(title, clientsAxis, yAxis)
	if logY {
		positive := metric
		metric = func(r Run) (float64, bool) {
			v, ok := positive(r)
			return v, ok && v > 0
		}
	}
	lines := d.lines(metric)
	ylo, yhi := math.Inf(1), 0.0
	if ref > 0 {
		ylo, yhi = ref, ref
	}
	for _, l := range lines {
		xys := make(plotter.XYs, len(l.Points))
		for i, pt := range l.Points {
			xys[i] = plotter.XY{X: lg(float64(pt.N)), Y: pt.Value}
			if logY {
				xys[i].Y = lg(pt.Value)
			}
			ylo, yhi = min(ylo, pt.Value), max(yhi, pt.Value)
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.label(l.Key), err)
		}
		s.Color = seriesColor(l.Index)
		s.Shape = seriesGlyph(l.Index)
		s.Radius = vg.Points(3)
		thumbs := []plot.Thumbnailer{s}
		if len(xys) > 1 {
			ln, err := plotter.NewLine(xys)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.label(l.Key), err)
			}
			ln.Color = seriesColor(l.Index)
			ln.Width = vg.Points(1.25)
			c.plot.Add(ln)
			thumbs = append([]plot.Thumbnailer{ln}, thumbs...)
		}
		c.plot.Add(s)
		c.add(d.label(l.Key), thumbs...)
	}
	if len(lines) == 0 {
		c.plot.Title.Text += noDataSuffix
	}
	p := c.plot
	ticks := make(plot.ConstantTicks, len(d.ns))
	for i, n := range d.ns {
		ticks[i] = plot.Tick{Value: lg(float64(n)), Label: strconv.Itoa(n)}
	}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = logRange(float64(d.ns[0]), float64(d.ns[len(d.ns)-1]), 1.25)
	if ref > 0 {
		y := ref
		if logY {
			y = lg(ref)
		}
		r, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: y}, {X: p.X.Max, Y: y}})
		if err != nil {
			return nil, err
		}
		r.Color = referenceColor
		r.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(r)
		c.add(refName, r)
	}
	if logY {
		p.Y.Tick.Marker = logTicks125{}
		p.Y.Min, p.Y.Max = logRange(ylo, yhi, 1.5)
	} else {
		p.Y.Min, p.Y.Max = 0, 1
		if yhi > 0 {
			p.Y.Max = yhi * 1.1
		}
	}
	return c, nil
}

// versusClasses draws, per series without its class count and per N, one
// line of metric (the median of repeated runs) against the number of
// classes (log scale): how a fixed fleet's cost grows as it is split into
// classes.
func (d *dataset) versusClasses(title, yAxis string, metric func(Run) (float64, bool), logY bool) (*chart, error) {
	c := newChart(title, classesAxis, yAxis)
	type group struct {
		k seriesKey // Classes zeroed
		n int
	}
	values := map[group]map[int][]float64{}
	var order []group
	var classes []int
	for _, r := range d.runs {
		v, ok := metric(r)
		if !ok || (logY && v <= 0) {
			continue
		}
		k := keyOf(r)
		k.Classes = 0
		g := group{k, r.Clients}
		if values[g] == nil {
			values[g] = map[int][]float64{}
			order = append(order, g)
		}
		values[g][r.Classes] = append(values[g][r.Classes], v)
		if !slices.Contains(classes, r.Classes) {
			classes = append(classes, r.Classes)
		}
	}
	slices.Sort(classes)
	unclassed := *d
	unclassed.classesVary = false
	ylo, yhi := math.Inf(1), 0.0
	for i, g := range order {
		var xys plotter.XYs
		for _, k := range classes {
			if vs, ok := values[g][k]; ok {
				v := median(vs)
				ylo, yhi = min(ylo, v), max(yhi, v)
				if logY {
					v = lg(v)
				}
				xys = append(xys, plotter.XY{X: lg(float64(k)), Y: v})
			}
		}
		name := fmt.Sprintf("%s N=%d", unclassed.label(g.k), g.n)
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		sc.Color, sc.Shape, sc.Radius = seriesColor(i), seriesGlyph(i), vg.Points(3)
		thumbs := []plot.Thumbnailer{sc}
		if len(xys) > 1 {
			ln, err := plotter.NewLine(xys)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			ln.Color, ln.Width = seriesColor(i), vg.Points(1.25)
			c.plot.Add(ln)
			thumbs = append([]plot.Thumbnailer{ln}, thumbs...)
		}
		c.plot.Add(sc)
		c.add(name, thumbs...)
	}
	if len(order) == 0 {
		c.plot.Title.Text += noDataSuffix
		return c, nil
	}
	ticks := make(plot.ConstantTicks, len(classes))
	for i, k := range classes {
		ticks[i] = plot.Tick{Value: lg(float64(k)), Label: strconv.Itoa(k)}
	}
	c.plot.X.Tick.Marker = ticks
	c.plot.X.Min, c.plot.X.Max = logRange(float64(classes[0]), float64(classes[len(classes)-1]), 1.25)
	if logY {
		c.plot.Y.Tick.Marker = logTicks125{}
		c.plot.Y.Min, c.plot.Y.Max = logRange(ylo, yhi, 1.5)
	} else {
		c.plot.Y.Min, c.plot.Y.Max = 0, yhi*1.1
	}
	return c, nil
}

// figure is one file of the report; when, if set, says whether the data
// set calls for it.
type figure struct {
	file, title string
	build       func(*dataset) (*chart, error)
	when        func(*dataset) bool
}

var figures = []figure{
	{latencyCDFFile, "Latency CDF", (*dataset).latencyCDF, nil},
	{timeToLastFile, "Time to last client vs N", func(d *dataset) (*chart, error) {
		return d.versusN(timeToLastTitle, timeToLastAxis, timeToLast, true, 0, "")
	}, nil},
	{memoryPerStreamFile, "Server memory per idle stream vs N", func(d *dataset) (*chart, error) {
		return d.versusN(memoryTitle, memoryAxis, kibPerStream, true, streamTargetKiB, streamTargetName)
	}, nil},
	{cpuFile, "Server CPU per update vs N", func(d *dataset) (*chart, error) {
		return d.versusN(cpuTitle, cpuAxis, cpuPerUpdate, false, 0, "")
	}, nil},
	{classesFile, "Time to last client vs classes", func(d *dataset) (*chart, error) {
		return d.versusClasses(classesTitle, timeToLastAxis, timeToLastAfterSent, true)
	}, classesVary},
	{classesCPUFile, "Server CPU per update vs classes", func(d *dataset) (*chart, error) {
		return d.versusClasses(classesCPUTitle, cpuAxis, cpuPerUpdate, false)
	}, classesVary},
}

func classesVary(d *dataset) bool { return d.classesVary }
