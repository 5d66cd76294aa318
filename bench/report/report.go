package report

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Options tune Write.
type Options struct {
	// PNG also writes each figure as a PNG next to its SVG.
	PNG bool
}

// ReportFile is the markdown summary's name in the output directory.
const ReportFile = "report.md"

// Write draws the figures of runs into dir (created if needed) as SVG (and
// PNG with opts.PNG) and writes ReportFile, which links them relatively. The
// output depends only on the set of runs, not on their order.
func Write(dir string, runs []Run, opts Options) error {
	if len(runs) == 0 {
		return errors.New("no runs to report")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d := newDataset(runs)
	var names []string
	for _, f := range figures {
		if f.when != nil && !f.when(d) {
			continue
		}
		c, err := f.build(d)
		if err != nil {
			return fmt.Errorf("figure %s: %w", f.file, err)
		}
		names = append(names, f.file+".svg")
		exts := []string{".svg"}
		if opts.PNG {
			exts = append(exts, ".png")
		}
		for _, ext := range exts {
			if err := c.save(filepath.Join(dir, f.file+ext)); err != nil {
				return fmt.Errorf("figure %s: %w", f.file+ext, err)
			}
		}
	}
	out, err := os.Create(filepath.Join(dir, ReportFile))
	if err != nil {
		return err
	}
	if err := d.writeMarkdown(out, names); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
