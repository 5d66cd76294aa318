package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/xds-relay/xds-relay/bench"
)

// terminalProgress returns bench's progress reporter: a bar on stderr per
// phase, or nil (no bars) when stderr is not a terminal or quiet is set.
func terminalProgress(quiet bool, label string) func(phase string, total int) bench.Progress {
	if quiet || !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return func(phase string, total int) bench.Progress {
		return bar{progressbar.NewOptions(total,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription(label+" "+phase),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)}
	}
}

type bar struct{ b *progressbar.ProgressBar }

func (b bar) Add(n int) { _ = b.b.Add(n) }
func (b bar) Finish()   { _ = b.b.Finish() }
