package shard

// The legacy wildcard (spec "How the client specifies what resources to
// return"): before a client names anything for a type, a request naming
// nothing asks for the wildcard. The rule lives here for both directions:
// the relay reads it in its clients' requests (relay/) and writes it in its
// own to the control plane (upstream/).

// SotWNames is the SotW resource_names rule of one stream and type: until
// a non-empty resource_names was sent for the type, the empty list is the
// legacy wildcard; after it, the empty list asks for nothing, and "*" is
// the explicit wildcard. The name "" counts as a name here ([""] is a
// non-empty list) but matches nothing: [""] unsubscribes from everything,
// as in go-control-plane. The zero value is a type nothing was sent of.
type SotWNames struct {
	listed bool // a non-empty list was sent: the legacy wildcard is over
}

// Read returns the subscription a request's resource_names stands for, and
// records a non-empty list.
func (n *SotWNames) Read(names []string) Subscription {
	if !n.listed && len(names) == 0 {
		return Subscription{Wildcard: true}
	}
	n.listed = true
	return NewSubscription(names, false)
}

// Note records a request's list without reading its names: a stale
// request is ignored, but a non-empty list in it ends the legacy wildcard
// all the same, as its sender means it.
func (n *SotWNames) Note(names []string) {
	n.listed = n.listed || len(names) > 0
}

// Listed reports whether the legacy wildcard is over: the empty list now
// asks for nothing.
func (n SotWNames) Listed() bool { return n.listed }

// Write returns the resource_names asking for want, and records a
// non-empty list. The wildcard alone is the legacy empty list while that is
// still available; with explicitStar, the wildcard is always "*" (names
// beside it listed), as the spec has it. ok is false when want cannot be
// said on this stream: the wildcard alone after a list, without
// explicitStar (an upstream that mishandles "*" must be asked on a new
// stream), or nothing before any list (the empty list would ask for the
// wildcard).
func (n *SotWNames) Write(want Subscription, explicitStar bool) (names []string, ok bool) {
	switch {
	case want.Wildcard && explicitStar:
		names = append(make([]string, 0, 1+len(want.Names)), Wildcard)
		names = append(names, want.Names...)
	case want.Wildcard && n.listed, want.Empty() && !n.listed:
		return nil, false
	case want.Wildcard:
		return nil, true // the legacy wildcard
	default:
		names = want.Names
	}
	n.listed = n.listed || len(names) > 0
	return names, true
}

// DeltaLegacyWildcard reports whether a delta request subscribes the
// legacy wildcard: the first request of a type on a stream, naming nothing
// to subscribe or unsubscribe.
func DeltaLegacyWildcard(first bool, subscribe, unsubscribe []string) bool {
	return first && len(subscribe) == 0 && len(unsubscribe) == 0
}
