// Package bench owns the relay's load-generation parts: an embedded upstream
// control plane (go-control-plane) with synthetic resources, raw SotW ADS
// clients that timestamp every response they receive, and process
// measurements (CPU seconds, RSS) of a relay running as a child process.
// The command bench/cmd/xds-bench assembles them; see docs/benchmarks.md.
package bench
