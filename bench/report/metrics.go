package report

// Per-run metrics shared by the figures and the tables. ok is false when the
// run did not measure the quantity.

// serverMeasured reports whether the bench measured the server process (a
// child process read from /proc); when it is not (the direct target shares
// the bench's process), CPU and memory are absent, not zero.
func serverMeasured(r Run) bool { return r.ServerRSSIdle > 0 || r.ServerRSSAfter > 0 }

// timeToLast is the update's time to the last client, in seconds.
func timeToLast(r Run) (float64, bool) { return r.Last.Seconds(), true }

// cpuPerUpdate is the server's CPU seconds spent on the update.
func cpuPerUpdate(r Run) (float64, bool) { return r.ServerCPU.Seconds(), serverMeasured(r) }

// kibPerStream is the server's idle memory per client stream in KiB: RSS
// with every client in sync, less the RSS before any client connected when
// the bench recorded it, over N.
func kibPerStream(r Run) (float64, bool) {
	if !serverMeasured(r) || r.ServerRSSIdle <= 0 {
		return 0, false
	}
	return float64(r.ServerRSSIdle-r.ServerRSSBase) / float64(r.Clients) / 1024, true
}

// timeToLastAfterSent is the time to the last client with the upstream's
// own sending taken out (each client from its class's sent instant), in
// seconds; results that predate it have none.
func timeToLastAfterSent(r Run) (float64, bool) {
	return r.AfterSentLast.Seconds(), r.AfterSentLast > 0
}
