package shard

import "time"

// The states a table keeps about its upstream, each a small type whose
// methods are the only way to change it (as grpc-go's xdsclient keeps a
// watch state per resource). A table has one upstreamState for its type and
// one pendingName per name only the upstream can tell about.

// UpdateKind says what an upstream update tells about the type's state.
type UpdateKind uint8

const (
	// UpdateMerge: the resources are merged into what is held; absence
	// means nothing (a SotW response for a type other than Listener and
	// Cluster, which may list only some resources). The zero kind.
	UpdateMerge UpdateKind = iota
	// UpdateFull: the resources (and the heartbeat names) are the complete
	// state; anything else is deleted, and absence means deletion.
	UpdateFull
	// UpdateIncremental: resources are merged and Removed are deleted; the
	// source reports deletions (a delta upstream), so absence is known.
	UpdateIncremental
	// UpdateHeartbeats: the upstream's message held TTL heartbeats only. It
	// is no answer about the state: it neither resolves pending names nor
	// changes what absence means.
	UpdateHeartbeats
)

// answers reports whether an update of kind k is an answer about the state.
func (k UpdateKind) answers() bool { return k != UpdateHeartbeats }

// absenceKnown reports whether, after an answer of kind k, a resource the
// table lacks is known not to exist.
func (k UpdateKind) absenceKnown() bool { return k == UpdateFull || k == UpdateIncremental }

// answerPhase is how far the upstream has answered for a table's type.
//
//	unanswered ──answer, or a pending name's grace passed──▶ answered
//	answered ──the wildcard asked for after anything else──▶ wildcardReasked
//	wildcardReasked ──answer──▶ answered
//	wildcardReasked ──asked for without the wildcard──▶ answered
//
// The last transition: a wildcard re-asked, then dropped before its answer
// came, will never be answered (an upstream need not answer what it was no
// longer asked for), so named shards stop waiting for it. Names they lack
// are pending by then (asked by name anew), and wait for their own answer.
//
// Heartbeat-only messages are no answer and change nothing.
type answerPhase uint8

const (
	unanswered      answerPhase = iota // nothing is served: the table knows nothing yet
	answered                           // the table holds the upstream's answer
	wildcardReasked                    // answered, but the wildcard asked for since is not: wildcard shards wait
)

// upstreamState is what a table knows of its upstream for the type: how far
// it answered, what it was asked for and what its answers mean. Part of its
// table: guarded by Class.mu.
type upstreamState struct {
	phase answerPhase
	// requested is what the upstream was last asked for, meaningful only
	// when reported: sources that always hold the complete state (the file
	// source) never report, and nothing is pruned or awaited for them.
	requested Subscription
	reported  bool
	// incremental: the upstream speaks delta, its answers name deletions,
	// so every type's names wait for its answer (not only full-state ones).
	incremental bool
	// absenceKnown: the last answer was complete or incremental, so a
	// resource the table lacks does not exist (Response.AbsenceKnown).
	absenceKnown bool
	// version is the version_info of the last answer when the upstream's
	// versions are passed through (Update.Version); empty: content hashes.
	version string
	// scope is what the wildcard asked for stands for (read-only).
	scope WildcardScope
}

// ask records that the upstream was asked for sub (Class.Requested). A
// wildcard asked for anew after an answer is awaited: the table's leftover
// names are not the wildcard's state.
func (u *upstreamState) ask(sub Subscription, incremental bool) {
	switch {
	case sub.Wildcard && !u.asksWildcard() && u.phase == answered:
		u.phase = wildcardReasked
	case !sub.Wildcard && u.phase == wildcardReasked:
		u.phase = answered
	}
	u.requested, u.reported, u.incremental = sub, true, incremental
}

// answer records an answer of kind k (not heartbeats). It reports whether
// the answer is the first or completes a re-asked wildcard: every shard of
// the type may be served anew.
func (u *upstreamState) answer(k UpdateKind, version string) (servesAll bool) {
	u.absenceKnown, u.version = k.absenceKnown(), version
	servesAll = u.phase != answered
	u.phase = answered
	return servesAll
}

// silentThroughGrace records that a pending name's grace passed with no
// answer: an upstream that never answered the type has answered "nothing",
// as known as its answers would have made it.
func (u *upstreamState) silentThroughGrace(fullState bool) {
	if u.phase == unanswered {
		u.phase = answered
		u.absenceKnown = fullState || u.incremental
	}
}

// hasAnswered reports whether the upstream answered for the type (or its
// silence through a grace counts as one).
func (u *upstreamState) hasAnswered() bool { return u.phase != unanswered }

// wildcardAwaited reports whether a re-asked wildcard's answer is not in.
func (u *upstreamState) wildcardAwaited() bool { return u.phase == wildcardReasked }

// servesWildcard reports whether the table holds a wildcard shard's whole
// state: answered, and the wildcard is what was asked (or the source holds
// the complete state).
func (u *upstreamState) servesWildcard() bool {
	return u.phase == answered && (!u.reported || u.requested.Wildcard)
}

// asksWildcard reports whether the upstream was last asked for the wildcard.
func (u *upstreamState) asksWildcard() bool { return u.reported && u.requested.Wildcard }

// unaskedName reports whether name is outside what an upstream subscribing
// by name was last asked for: the upstream has yet to tell about it.
func (u *upstreamState) unaskedName(name string) bool {
	return u.reported && !u.coversByWildcard() && !u.requested.Has(name)
}

// coversByWildcard reports whether the upstream was last asked for a
// wildcard that covers every name (WildcardEveryResource): names beside it
// need no answer of their own.
func (u *upstreamState) coversByWildcard() bool {
	return u.requested.Wildcard && u.scope == WildcardEveryResource
}

// askedFor reports whether the upstream was last asked for r, by name or
// by one of its aliases (or for the wildcard, or never told: every
// resource).
func (u *upstreamState) askedFor(r *Resource) bool {
	return !u.reported || u.requested.Covers(r.Name, r.Aliases())
}

// askedForNothing reports whether the upstream need not be told anything
// more of the type: never asked, or last asked for nothing.
func (u *upstreamState) askedForNothing() bool { return !u.reported || u.requested.Empty() }

// pendingState is where a pending name is in its wait for the upstream.
//
//	(absent) ──wanted: newly subscribed, not held, not asked──▶ wanted
//	wanted ──asked for (full-state type)──▶ awaitingUntil(now+PendingGrace)
//	wanted ──asked for (other types, incremental upstream)──▶ awaitingAnswer
//	any ──the upstream sent it, or (incremental) removed it──▶ resolved (absent)
//	awaitingAnswer, awaitingUntil ──any answer for the type──▶ resolved
//	awaitingUntil ──deadline passed──▶ resolved
//	awaiting… ──wanted anew, no longer in what was last asked──▶ wanted
//	wanted ──nobody wants it any more──▶ (absent)
//	any ──not asked for any more and nobody wants it, or the wildcard asked──▶ (absent)
//
// A wanted name waits indefinitely (the upstream is down, or not yet told):
// clients keep what they have.
type pendingState uint8

const (
	wanted         pendingState = iota // wanted, the upstream not asked yet
	awaitingAnswer                     // asked; only an answer resolves it
	awaitingUntil                      // asked; an answer or the deadline resolves it
)

// pendingName is one name's wait; resolved names leave the table's map.
type pendingName struct {
	state    pendingState
	deadline time.Time // awaitingUntil only
}

// waiting reports whether shards needing the name must still treat it as
// unknown at now.
func (p pendingName) waiting(now time.Time) bool {
	return p.state != awaitingUntil || now.Before(p.deadline)
}

// pendingNames holds a table's pending names (Guarded by Class.mu).
type pendingNames map[string]pendingName

// want (re)starts the wait of name: wanted, not asked yet.
func (p pendingNames) want(name string) { p[name] = pendingName{} }

// ask moves name from wanted to awaiting the upstream's answer, until
// now+PendingGrace with grace. It returns the deadline (zero: none, or name
// was not wanted).
func (p pendingNames) ask(name string, grace bool, now time.Time) (deadline time.Time) {
	if p[name].state != wanted {
		return time.Time{}
	}
	if !grace {
		p[name] = pendingName{state: awaitingAnswer}
		return time.Time{}
	}
	deadline = now.Add(PendingGrace)
	p[name] = pendingName{state: awaitingUntil, deadline: deadline}
	return deadline
}

// told resolves name, which the upstream told about; it reports whether name
// was pending.
func (p pendingNames) told(name string) bool {
	_, ok := p[name]
	delete(p, name)
	return ok
}

// unwanted forgets name, which nobody wants any more, if it was never asked
// for: its answer will not come.
func (p pendingNames) unwanted(name string) {
	if n, ok := p[name]; ok && n.state == wanted {
		delete(p, name)
	}
}

// answerCame resolves every name asked for: an answer about the type has
// come, and what it lacks it does not hold. It returns the names resolved.
func (p pendingNames) answerCame() []string {
	var out []string
	for n, pn := range p {
		if pn.state != wanted {
			delete(p, n)
			out = append(out, n)
		}
	}
	return out
}

// awaited reports whether name waits for the answer to a request that
// asked for it.
func (p pendingNames) awaited(name string) bool {
	pn, ok := p[name]
	return ok && pn.state != wanted
}

// nextDeadline returns the earliest deadline of the names awaiting one
// (zero: none).
func (p pendingNames) nextDeadline() (next time.Time) {
	for _, pn := range p {
		if pn.state == awaitingUntil && (next.IsZero() || pn.deadline.Before(next)) {
			next = pn.deadline
		}
	}
	return next
}

// asked reports whether a name waits for the answer to a request that
// asked for it.
func (p pendingNames) asked() bool {
	for _, pn := range p {
		if pn.state != wanted {
			return true
		}
	}
	return false
}

// expire resolves the names whose grace passed at now, and returns them.
func (p pendingNames) expire(now time.Time) []string {
	var out []string
	for n, pn := range p {
		if pn.state == awaitingUntil && !now.Before(pn.deadline) {
			delete(p, n)
			out = append(out, n)
		}
	}
	return out
}
