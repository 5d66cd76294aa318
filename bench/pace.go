package bench

import "time"

// An update's classes are installed as fast as the server can by default.
// A control plane does not do that to a relay: it computes and sends each
// class's update in turn (go-control-plane's snapshot cache, given 100
// classes one after the other, sends them over 150–400 ms here), so the
// relay wakes for each class. FanoutConfig.Pace installs class k's state
// k × Pace after the update began, for every target alike: the relay's
// control plane sets class k's snapshot then, the limit, tcp and direct
// servers publish it then. The limit is then the floor of a server that
// is handed the classes at that pace, which a relay is.

// awaitTurn sleeps until class k's turn in an update paced d apart that
// began at start; no wait when d is 0.
func awaitTurn(start time.Time, k int, d time.Duration) {
	if d > 0 {
		time.Sleep(time.Until(start.Add(time.Duration(k) * d)))
	}
}
