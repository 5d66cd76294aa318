// Package bench owns the relay's load-generation parts: an embedded upstream
// control plane (go-control-plane) with synthetic resources; the measured
// servers of each target (the relay, go-control-plane itself, a bare gRPC
// server and a plain TCP server writing pre-encoded bytes), each run as a
// child process ("xds-bench serve", Serve) so that its CPU and RSS are read
// from /proc apart from the clients'; raw SotW and delta clients (ADS or the
// CDS service, several streams per connection) and TCP clients that
// timestamp every response they receive; and the run itself (RunFanout).
// The command bench/cmd/xds-bench assembles them; see docs/benchmarks.md.
package bench
