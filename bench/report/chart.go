package report

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Figure size, the legend column included.
const (
	figureWidth  = 9 * vg.Inch
	figureHeight = 4.5 * vg.Inch
	legendGap    = 12 // points between the plot area and the legend
)

// chart is a plot with its legend in a column to the right of the plot area,
// where it hides no data.
type chart struct {
	plot        *plot.Plot
	legend      plot.Legend
	legendWidth vg.Length // widest entry's text
	labels      []string  // the legend's entries
}

func newChart(title, x, y string) *chart {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = vg.Points(10)
	return &chart{plot: p, legend: l}
}

// add names thumbs in the legend.
func (c *chart) add(label string, thumbs ...plot.Thumbnailer) {
	c.legend.Add(label, thumbs...)
	c.labels = append(c.labels, label)
	c.legendWidth = max(c.legendWidth, c.legend.TextStyle.Width(label))
}

// save writes the chart to file, its format named by the extension (svg,
// png).
func (c *chart) save(file string) (err error) {
	format := strings.TrimPrefix(filepath.Ext(file), ".")
	// Tall enough for the legend: a line per entry, below the title.
	entry := c.legend.TextStyle.FontExtents().Height + c.legend.Padding
	title := c.plot.Title.TextStyle.Height(c.plot.Title.Text) + c.plot.Title.Padding
	height := max(figureHeight, vg.Length(len(c.labels))*entry+title+vg.Points(24))
	cw, err := draw.NewFormattedCanvas(figureWidth, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	column := c.legendWidth
	if column > 0 {
		column += c.legend.ThumbnailWidth + 3*c.legend.TextStyle.Width(" ") + legendGap
	}
	c.plot.Draw(draw.Crop(dc, 0, -column, 0, 0))
	if column > 0 {
		// Level with the top of the plot area, below the title.
		c.legend.Draw(draw.Crop(dc, figureWidth-column+legendGap, 0, 0, -title))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = cw.WriteTo(f)
	return err
}

// Log axes are drawn as linear axes over log10 of the data, with ticks
// labelled in the data's units: gonum/plot's LogScale places the axis
// label's glyph box at the data-space midpoint, which pads the plot area by
// far too much.

// lg is the axis coordinate of v on a log axis.
func lg(v float64) float64 { return math.Log10(v) }

// logTicks125 marks a log10 axis at 1, 2 and 5 per decade (labelled) and at
// the other integers (unlabelled).
type logTicks125 struct{}

func (logTicks125) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(lo); e <= math.Ceil(hi); e++ {
		for i := 1; i < 10; i++ {
			v := float64(i) * math.Pow10(int(e))
			if lg(v) < lo || lg(v) > hi {
				continue
			}
			t := plot.Tick{Value: lg(v)}
			if i == 1 || i == 2 || i == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// logRange is the log10 axis range of [lo, hi] (lo > 0) widened by factor;
// an empty range is [1, 10].
func logRange(lo, hi, factor float64) (float64, float64) {
	if lo <= 0 || hi < lo || math.IsInf(lo, 0) {
		return 0, 1
	}
	return lg(lo / factor), lg(hi * factor)
}
