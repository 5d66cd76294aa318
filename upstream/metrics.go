package upstream

// Metrics receives the upstream events the relay counts. Implementations
// must be cheap and safe for concurrent use. Class names are bounded by the
// operator's node-class rules.
type Metrics interface {
	// Reconnecting counts a class stream that failed and will retry.
	Reconnecting(class string)
	// Response counts a response of typeURL the relay ACKed (accepted) or
	// NACKed.
	Response(class, typeURL string, accepted bool)
	// Restarted counts a class stream the relay restarted itself, for
	// reason (not a failure: no backoff, paced by RestartPace).
	Restarted(class string, reason RestartReason)
	// RepeatedResponse counts a response repeating, in answer to an ACK,
	// the one before it StormRepeats times or more; its ACK is deferred.
	RepeatedResponse(class, typeURL string)
	// NamesIgnored counts a SotW class stream that stopped asking for
	// typeURL by name, because the upstream left a named request unanswered
	// (NamesSilenceGrace), and asks for the wildcard instead.
	NamesIgnored(class, typeURL string)
	// WaitingForStream counts a class stream that found no upstream
	// connection with room and waits for one (pool.go).
	WaitingForStream(class string)
	// LoadReportSent counts a load report of the class sent to the control
	// plane (lrs.go).
	LoadReportSent(class string)
	// ConnectionFailed counts a class stream that could not be opened
	// because no upstream connection could be made or was ready (also
	// counted by Reconnecting).
	ConnectionFailed(class string)
	// Moved counts a class stream opened on another member of its
	// affinity tier than its last (upstream.affinity: class).
	Moved(class string)
}

// NopMetrics discards every event.
type NopMetrics struct{}

var _ Metrics = NopMetrics{}

func (NopMetrics) Reconnecting(string)             {}
func (NopMetrics) Response(string, string, bool)   {}
func (NopMetrics) Restarted(string, RestartReason) {}
func (NopMetrics) RepeatedResponse(string, string) {}
func (NopMetrics) NamesIgnored(string, string)     {}
func (NopMetrics) WaitingForStream(string)         {}
func (NopMetrics) LoadReportSent(string)           {}
func (NopMetrics) ConnectionFailed(string)         {}
func (NopMetrics) Moved(string)                    {}
