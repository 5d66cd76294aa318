// Package report owns the presentation of fan-out benchmark results: it reads
// the JSON that xds-bench writes (one bench.FanoutResult or an array of them),
// groups the runs into series (target, cache, protocol, ...), draws the
// figures with gonum/plot (latency CDF, time to last client, server memory per
// stream and server CPU per update, each against N) and writes a markdown
// summary with a table of every run and relay-vs-baseline ratios. It measures
// nothing itself; the command is `xds-bench report`.
package report
