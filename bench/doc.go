// Package bench owns the relay's load-generation parts: an embedded upstream
// control plane (go-control-plane) with synthetic resources, from a CDS
// state of N clusters to a consistent LDS/RDS/CDS/EDS configuration per
// class with churn (Upstream, Churn); the measured servers of each fan-out
// target (the relay, go-control-plane itself, a bare gRPC server and a plain
// TCP server writing pre-encoded bytes), each run as a child process
// ("xds-bench serve", Serve) so that its CPU and RSS are read from /proc
// apart from the clients'; raw SotW and delta clients (ADS or the CDS
// service, several streams per connection) and TCP clients that timestamp
// every response they receive; proxy-like clients that follow the
// dependency chain and hold their exact state; and the runs themselves:
// RunFanout (one update to N streams), RunSoak (churn, client churn and
// upstream restarts, then an end-state check) and RunSlow (stalled clients).
// For many classes (Workload), each class's state shares a stated fraction
// of byte-identical clusters with the others (--overlap); the control plane
// notes when it finished sending each class's update (timedADS), so that
// results can take the upstream's own sending out; a churn run (churnRun)
// makes sustained EDS updates and reports update → client latencies. The
// command bench/cmd/xds-bench assembles them; see docs/benchmarks.md and
// docs/reliability.md.
package bench
