package shard

import (
	"slices"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// rebuild recomputes a shard's response from the table. It returns true when
// the shard's content changed (identical content is suppressed: same version,
// no new response).
func (t *table) rebuild(s *Shard) bool {
	if !t.up.hasAnswered() || (s.Sub.Wildcard && !t.up.servesWildcard()) {
		return false // a wildcard shard is not served a partial state
	}
	unknown := t.pendingIn(s, time.Now())
	if len(unknown) > 0 && t.fullState {
		return false // nor a full-state shard one lacking a name not yet answered
	}
	if t.up.wildcardAwaited() && t.fullState && !s.Sub.Wildcard && !t.siteWildcard() && t.lacksAny(s.Sub.Names) {
		return false // nor one lacking a name the pending wildcard's answer will tell of
	}
	var included []*Resource
	var outNames []string // the names of included; nil: not yet made
	var set heldSet
	if s.Sub.Wildcard && len(t.onDemand) > 0 {
		// A site-specific wildcard's set, and the on-demand names the
		// shard asks for beside it (wildcardscope.go).
		_, all := t.resources.sorted()
		for _, r := range all {
			if t.wildcardServes(s.Sub, r) {
				included = append(included, r)
				set.add(r)
			}
		}
	} else if s.Sub.Wildcard {
		// Explicit names are already covered: the table only holds resources
		// of the class's union interest, and a wildcard shard takes them all:
		// the table's sorted list and names, shared, and the sums the table
		// keeps of them (a class update of one resource of many costs that
		// resource, not the table).
		outNames, included = t.resources.sorted()
		set = t.resources.held
	} else {
		included = t.selectNames(s.Sub.Names)
		for _, r := range included {
			set.add(r)
		}
	}
	var aliases map[string]string
	hasTTL := false
	if set.rare > 0 {
		for _, r := range included {
			hasTTL = hasTTL || r.TTL() != nil
			for _, a := range r.Aliases() {
				if aliases == nil {
					aliases = map[string]string{}
				}
				aliases[a] = r.Name
			}
		}
	}
	// The version clients see is the content's; the pending names are part
	// of the shard version's identity only (Sum), so resolving one is news
	// to delta clients but not a new SotW version.
	contentSum := set.members.Sum(t.typeURL)
	for _, n := range unknown {
		set.members.AddPending(n)
	}
	sum := set.members.Sum(t.typeURL)
	cur := s.current.Load()
	if len(included) == 0 && !t.fullState && !t.up.absenceKnown {
		// Nothing to tell anyone: a SotW response would be a no-op, and with
		// a merging source absence is not known to be deletion.
		s.current.Store(nil)
		if cur != nil {
			cur.superseded()
		}
		return false
	}
	if cur != nil && cur.Sum == sum {
		return false
	}
	version := dedup.Version(contentSum)
	if t.up.version != "" {
		version = t.up.version // the upstream's, as of this content
	}
	if outNames == nil {
		outNames = make([]string, len(included))
		for i, r := range included {
			outNames[i] = r.Name
		}
	}
	// The body is built on first use (see Response.Body).
	next := &Response{TypeURL: t.typeURL, Version: version, Sum: sum, contentSum: contentSum,
		BodyLen: wire.BodySize(version, t.typeURL, set.size),
		Names:   outNames, Resources: included, AbsenceKnown: t.up.absenceKnown, Unknown: unknown, Aliases: aliases,
		HasTTL: hasTTL, UpstreamVersioned: t.up.version != ""}
	if cur != nil {
		next.HasPrev, next.PrevSum = true, cur.Sum
		next.Changed, next.Removed = diff(cur, next)
	}
	s.current.Store(next)
	if cur != nil {
		cur.superseded()
	}
	return true
}

// diff returns the resources of next that old lacks or has at another
// version, and, when absence is known, the names of old that next lacks.
// Both responses are sorted by name.
func diff(old, next *Response) (changed []*Resource, removed []string) {
	i, j := 0, 0
	for i < len(old.Resources) || j < len(next.Resources) {
		if i < len(old.Resources) && j < len(next.Resources) && old.Resources[i] == next.Resources[j] {
			// The same resource: a table's list with one content
			// replaced is the old list but for that slot.
			i++
			j++
			continue
		}
		switch {
		case j == len(next.Resources) || i < len(old.Resources) && old.Resources[i].Name < next.Resources[j].Name:
			if next.KnownAbsent(old.Resources[i].Name) {
				removed = append(removed, old.Resources[i].Name)
			}
			i++
		case i == len(old.Resources) || next.Resources[j].Name < old.Resources[i].Name:
			changed = append(changed, next.Resources[j])
			j++
		default:
			if old.Resources[i].Hash != next.Resources[j].Hash {
				changed = append(changed, next.Resources[j])
			}
			i++
			j++
		}
	}
	return changed, removed
}

// lacksAny reports whether some of names is not held (by name or alias).
func (t *table) lacksAny(names []string) bool {
	for _, n := range names {
		if _, ok := t.resource(n); !ok {
			return true
		}
	}
	return false
}

// selectNames returns the resources subscribed to by name or alias, each
// once, sorted by name.
func (t *table) selectNames(names []string) []*Resource {
	out := make([]*Resource, 0, len(names))
	aliased := false
	for _, n := range names {
		if r, ok := t.resources.get(n); ok {
			out = append(out, r)
		} else if r, ok := t.resource(n); ok {
			out = append(out, r)
			aliased = true
		}
	}
	if aliased {
		slices.SortFunc(out, func(a, b *Resource) int { return strings.Compare(a.Name, b.Name) })
		out = slices.CompactFunc(out, func(a, b *Resource) bool { return a == b })
	}
	return out
}
