package conformance

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// Model is the reference: the upstream's state, from which it computes
// what every client must hold given its subscription.
//
// A client must hold, of each type, exactly the resources its subscription
// covers (every resource for a wildcard, but for the names a site-specific
// wildcard leaves out; the named ones otherwise) that
// exist upstream, each at the upstream's current content; for SotW that is
// its last accepted Listener/Cluster response and the merge of its other
// responses; for delta, every response applied, removals included
// (xdstest.Client keeps both by the spec's client rules). The exceptions,
// each explicit here:
//
//   - staleER: a RouteConfiguration or ClusterLoadAssignment deleted
//     upstream may still be held, at a content it had since the last quiet
//     point at which it existed and a client of the class was checked
//     holding it, (a) by a SotW client, since SotW has no deletion for
//     these types (spec "Deleting Resources"), and (b) by any client when
//     the relay's source is a SotW upstream, which cannot say they were
//     deleted (docs/architecture.md "Delta clients", removal rule: "a
//     ClusterLoadAssignment or RouteConfiguration missing from SotW
//     responses is not [reported]"). Per class: a quiet point proves a
//     class current only in what its clients cover. A class whose clients
//     left keeps its shards, and its upstream stream, but nothing waits for
//     it to be answered; a SotW upstream sends its state as of when it
//     answers (spec "Knowing When a Requested Resource Does Not Exist":
//     "the delivery of the updates is eventually consistent"; "Resource
//     updates": it "does not need to send an update until it determines a
//     new version is available"), so a change followed by the deletion
//     may both fall between two answers, and the class, never sent the
//     change, keeps the content before it.
//
//   - rejected: a client that NACKed a response keeps what it had; the
//     relay does not re-send a NACKed version, only the next different one
//     (docs/architecture.md "When a stream is sent something": "NACK ...
//     the NACKed version is not re-sent"). A name whose held content
//     differs from the model is accepted when the client's last NACKed
//     word on it was exactly the model's (the relay offered it); a
//     lingering RouteConfiguration or ClusterLoadAssignment (staleER) may
//     linger at the content the client kept when it NACKed a newer one.
//
//   - onDemandShared: with a site-specific wildcard, a wildcard client may
//     hold a name the wildcard leaves out, at its current content, once a
//     client of its class asked for it by name (see Check).
//
// Timing, not state: names that are never answered (a Listener or Cluster
// that does not exist) hold a shard back for shard.PendingGrace
// (docs/architecture.md "The request path", step 4); the quiet-point wait
// is longer than that grace.
type Model struct {
	upstream map[string]map[string]int // short type -> name -> generation
	// fresh: short type -> name -> generations since the last quiet point
	// where it existed, what a class that had no client yet may hold (it
	// asks its upstream when its first client comes).
	fresh map[string]map[string][]int
	// recent: per class that had a client, short type -> name ->
	// generations since the last quiet point where it existed and a client
	// of the class covering it conformed.
	recent map[string]map[string]map[string][]int
	// absenceUnknownER: the relay's source is a SotW upstream, so deleted
	// RouteConfigurations and ClusterLoadAssignments are not known absent.
	absenceUnknownER bool
	// onDemand reports the names a site-specific wildcard leaves out (nil:
	// the wildcard is every resource).
	onDemand func(t, name string) bool
	// named: class -> short type -> the names a client of the class ever
	// asked for by name (Asked).
	named map[string]map[string]map[string]bool
}

// Asked records that a client of class asked for names of type t by name.
func (m *Model) Asked(class, t string, names []string) {
	if m.named[class] == nil {
		m.named[class] = map[string]map[string]bool{}
	}
	if m.named[class][t] == nil {
		m.named[class][t] = map[string]bool{}
	}
	for _, n := range names {
		m.named[class][t][n] = true
	}
}

// NewModel returns the model of an empty upstream whose wildcard is every
// resource.
func NewModel(absenceUnknownER bool) *Model {
	return NewSiteModel(absenceUnknownER, nil)
}

// NewSiteModel returns the model of an empty upstream whose wildcard
// leaves out the names onDemand reports (a site-specific wildcard).
func NewSiteModel(absenceUnknownER bool, onDemand func(t, name string) bool) *Model {
	m := &Model{upstream: map[string]map[string]int{}, fresh: map[string]map[string][]int{},
		recent: map[string]map[string]map[string][]int{}, absenceUnknownER: absenceUnknownER, onDemand: onDemand,
		named: map[string]map[string]map[string]bool{}}
	for _, t := range shortTypes {
		m.upstream[t], m.fresh[t] = map[string]int{}, map[string][]int{}
	}
	return m
}

// Join records that a client of class joined: from now on the class's
// recent generations are its own.
func (m *Model) Join(class string) {
	if m.recent[class] != nil {
		return
	}
	m.recent[class] = map[string]map[string][]int{}
	for t, byName := range m.fresh {
		m.recent[class][t] = map[string][]int{}
		for n, gens := range byName {
			m.recent[class][t][n] = slices.Clone(gens)
		}
	}
}

// Set records that the upstream now holds name of type t at gen.
func (m *Model) Set(t, name string, gen int) {
	m.upstream[t][name] = gen
	m.fresh[t][name] = append(m.fresh[t][name], gen)
	for _, byType := range m.recent {
		byType[t][name] = append(byType[t][name], gen)
	}
}

// Delete records that the upstream deleted name of type t.
func (m *Model) Delete(t, name string) { delete(m.upstream[t], name) }

// Quiet marks a quiet point at which every client was found conforming: a
// resource that exists now can only be stale at its current content, in a
// class that had no client yet, or whose client covering it (covers
// reports one) was just checked.
func (m *Model) Quiet(covers func(class, t, name string) bool) {
	for _, t := range shortTypes {
		for n, g := range m.upstream[t] {
			m.fresh[t][n] = []int{g}
			for class, byType := range m.recent {
				if covers(class, t, n) {
					byType[t][n] = []int{g}
				}
			}
		}
	}
}

// ClientView is what the model needs of a client: its class, how it
// subscribes, what it holds and what it rejected, by name -> generation
// (0: absent).
type ClientView struct {
	Class    string
	Delta    bool
	Sub      xdstest.Sub
	Held     map[string]int
	Rejected map[string]int
}

// covers reports whether sub covers name of type t: by name, or by the
// wildcard when the name is in the wildcard's set.
func (m *Model) covers(t string, sub xdstest.Sub, name string) bool {
	if slices.Contains(sub.Names, name) {
		return true
	}
	return sub.Wildcard && (m.onDemand == nil || !m.onDemand(t, name))
}

// Check returns what is wrong with a client's view of type t (nil: it
// conforms).
func (m *Model) Check(t string, v ClientView) []string {
	covered := func(n string) bool { return m.covers(t, v.Sub, n) }
	// onDemandShared: a wildcard client may hold an on-demand name at its
	// content once a client of its class asked it by name: held before the
	// wildcard's answer, the relay cannot tell it from the wildcard's own
	// (docs/architecture.md, "Site-specific wildcards"), and a name asked by
	// a client that left stays asked while its shard lingers.
	onDemandShared := func(n string) bool {
		return v.Sub.Wildcard && m.onDemand != nil && m.onDemand(t, n) && m.named[v.Class][t][n]
	}
	names := map[string]bool{}
	for n := range v.Held {
		names[n] = true
	}
	for _, n := range v.Sub.Names {
		names[n] = true
	}
	if v.Sub.Wildcard {
		for n := range m.upstream[t] {
			if m.covers(t, v.Sub, n) {
				names[n] = true
			}
		}
	}
	staleER := !xdstest.FullState(xdstest.Long(t)) && (!v.Delta || m.absenceUnknownER)
	var problems []string
	for _, n := range slices.Sorted(maps.Keys(names)) {
		got, has := v.Held[n]
		rej, rejected := v.Rejected[n]
		if !covered(n) {
			if want, exists := m.upstream[t][n]; has && exists && got == want && onDemandShared(n) {
				continue
			}
			if has && v.Sub.Wildcard && rejected && rej == 0 {
				// A wildcard client cannot tell a name the wildcard leaves
				// out: it NACKed the response that left it out, and keeps
				// what it had (rejected).
				continue
			}
			if has {
				problems = append(problems, fmt.Sprintf("%s %s: held (gen %d) but not subscribed", t, n, got))
			}
			continue
		}
		want, exists := m.upstream[t][n]
		switch {
		case exists && has && got == want:
		case exists && rejected && rej == want:
		case exists && has:
			problems = append(problems, fmt.Sprintf("%s %s: gen %d, want gen %d", t, n, got, want))
		case exists:
			problems = append(problems, fmt.Sprintf("%s %s: missing, want gen %d", t, n, want))
		case !has:
		case staleER && (slices.Contains(m.recentGens(v.Class, t, n), got) || rejected):
			// Lingering at a recent content, or at the one it kept when it
			// NACKed a newer one (both exceptions at once).
		case rejected && rej == 0:
		default:
			problems = append(problems, fmt.Sprintf("%s %s: gen %d held, want absent (deleted or never created)", t, n, got))
		}
	}
	return problems
}

// recentGens returns the generations a lingering name may be held at by a
// client of class.
func (m *Model) recentGens(class, t, name string) []int {
	if byType := m.recent[class]; byType != nil {
		return byType[t][name]
	}
	return m.fresh[t][name]
}

// Want renders what the model expects a subscription to hold, for reports.
func (m *Model) Want(t string, sub xdstest.Sub) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m.upstream[t])) {
		if m.covers(t, sub, n) {
			parts = append(parts, fmt.Sprintf("%s:%d", n, m.upstream[t][n]))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func renderGens(held map[string]int) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(held)) {
		parts = append(parts, fmt.Sprintf("%s:%d", n, held[n]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}
