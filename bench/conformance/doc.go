// Package conformance is the relay's differential conformance engine: it
// runs seeded random schedules — clients joining and leaving (SotW and
// delta, ADS and per-type; legacy wildcard, explicit "*", names, "*" plus
// names; ACKs and NACKs; reconnects with what they hold) and upstream
// adds, changes, deletions and restarts — against relays in front of a
// matrix of upstreams (go-control-plane v0.14 snapshot cache in ADS mode
// and not, linear caches, each over SotW and delta; the relay's own file
// source; a chain of two relays), and at every quiet point checks each
// client's state against a reference model (Model). A divergence reports
// the seed and a shrunk schedule that replays it (testdata, TestReplay).
//
// The relays run in-process (app.Start), so a run is race-checked and
// starts in milliseconds. See docs/conformance.md.
package conformance
