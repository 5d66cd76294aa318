package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/xds-relay/xds-relay/bench/report"
)

const reportUsage = `usage: xds-bench report --out DIR [--png] FILE.json...

Reads the results that xds-bench --json wrote (each FILE one result object or
an array of them), merges them and writes to DIR:

  latency-cdf.svg        every run's latency CDF (upstream send → client receipt)
  time-to-last.svg       time to the last client vs N, one line per series
  memory-per-stream.svg  server RSS per idle stream vs N ((idle − base)/N when the
                         base RSS is recorded, else idle/N), with the 16 KiB target
  cpu.svg                server CPU seconds per update vs N
  report.md              a table of every run and relay ÷ limit/direct ratios per N,
                         linking the figures

A series is target[/cache] and protocol (plus clusters, classes, service or
streams per connection when they vary across the runs); repeated runs of a
series at one N are drawn at their median. Flags:
`

// reportMain runs `xds-bench report`; it returns the exit code.
func reportMain(args []string) int {
	return runReport(args, os.Stdout, os.Stderr)
}

func runReport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("xds-bench report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "directory to write the figures and report.md to (created if missing)")
	png := fs.Bool("png", false, "also write each figure as PNG")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), reportUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	runs, err := report.Load(fs.Args()...)
	if err != nil {
		fmt.Fprintln(stderr, "xds-bench report:", err)
		return 1
	}
	if err := report.Write(*out, runs, report.Options{PNG: *png}); err != nil {
		fmt.Fprintln(stderr, "xds-bench report:", err)
		return 1
	}
	fmt.Fprintf(stdout, "xds-bench report: %d runs from %d files → %s\n", len(runs), fs.NArg(), *out)
	return 0
}
