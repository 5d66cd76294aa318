package xdstest

import (
	"maps"
	"slices"
	"strconv"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// swDelta is a delta stream's state. The server keeps, per type, the
// resource versions it believes the client holds (from the responses sent,
// and initial_resource_versions on the first request of the type), and
// each response is the difference between that and the subscription:
// resources at another version, and removed_resources for names held that
// the subscription no longer covers (deleted, or out of the wildcard set
// while not named). Nonces correlate ACKs and NACKs only: every request's
// subscription change is honoured (spec). A NACK is recorded; nothing is
// resent until the next change.
type swDelta struct {
	s     *SiteWildcard
	nonce int // of the last response on the stream
	types map[string]*swDeltaType
}

// swDeltaType is a delta stream's state of one type URL.
type swDeltaType struct {
	swSub
	sent map[string]string // name -> version the client holds, as the server believes
	// force: names the next response must mention whatever the client
	// holds: sent if covered, else removed (just subscribed, or
	// unsubscribed beside the wildcard, spec "Unsubscribing from Resources").
	force map[string]bool
	// answerWildcard: the wildcard was newly subscribed; the next flush
	// answers it even with nothing new, so the client knows the state it
	// holds is the wildcard's whole set (as xds-relay and istiod do).
	answerWildcard bool
}

var _ swProtocol[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse] = (*swDelta)(nil)

func (p *swDelta) request(r *discoveryv3.DeltaDiscoveryRequest) {
	r = recordRequestLocked(p.s, &p.s.deltaReq, r)
	t := p.types[r.GetTypeUrl()]
	first := t == nil
	if first {
		t = &swDeltaType{swSub: swSub{names: map[string]bool{}}, sent: map[string]string{}, force: map[string]bool{}}
		p.types[r.GetTypeUrl()] = t
		// The legacy wildcard: the first request says nothing.
		t.wildcard = len(r.GetResourceNamesSubscribe()) == 0 && len(r.GetResourceNamesUnsubscribe()) == 0
		t.answerWildcard = t.wildcard
		maps.Copy(t.sent, r.GetInitialResourceVersions())
	}
	for _, n := range r.GetResourceNamesSubscribe() {
		if n == "*" {
			t.answerWildcard = t.answerWildcard || !t.wildcard
			t.wildcard = true
			continue
		}
		t.names[n] = true
		if _, claimed := r.GetInitialResourceVersions()[n]; !first || !claimed {
			t.force[n] = true // sent again even if the server thinks the client has it (spec)
		}
	}
	gone, all := map[string]bool{}, false
	for _, n := range r.GetResourceNamesUnsubscribe() {
		if n == "*" {
			t.wildcard, all = false, true
		} else {
			delete(t.names, n)
			gone[n] = true
		}
	}
	// An unsubscribed name is forgotten silently, as the client forgets
	// it; beside the wildcard the client must be told whether the
	// wildcard still covers it.
	for n := range gone {
		if t.wildcard {
			t.force[n] = true
		} else {
			delete(t.sent, n)
			delete(t.force, n)
		}
	}
	if all {
		for n := range t.sent {
			if !t.names[n] {
				delete(t.sent, n)
			}
		}
	}
	t.dirty = true
}

func (p *swDelta) changed(typeURL, name string, before, after *swEntry) bool {
	t := p.types[typeURL]
	return t != nil && t.mark(name, before, after)
}

// flush sends, per type with something new, the resources the client does
// not hold at their version and the removals of names it holds that the
// subscription no longer covers.
func (p *swDelta) flush() []*discoveryv3.DeltaDiscoveryResponse {
	var out []*discoveryv3.DeltaDiscoveryResponse
	for _, typeURL := range slices.Sorted(maps.Keys(p.types)) {
		t := p.types[typeURL]
		if !t.dirty {
			continue
		}
		st, want := t.take(p.s, typeURL)
		var res []*discoveryv3.Resource
		for _, n := range slices.Sorted(maps.Keys(want)) {
			v := strconv.Itoa(want[n].version)
			if t.force[n] || t.sent[n] != v {
				res = append(res, &discoveryv3.Resource{Name: n, Version: v, Resource: want[n].any})
				t.sent[n] = v
			}
		}
		removed := map[string]bool{}
		for n := range t.sent {
			if want[n] == nil {
				removed[n] = true
				delete(t.sent, n)
			}
		}
		for n := range t.force {
			if want[n] == nil {
				removed[n] = true
			}
		}
		clear(t.force)
		answer := t.answerWildcard
		t.answerWildcard = false
		if len(res) == 0 && len(removed) == 0 && !answer {
			continue
		}
		p.nonce++
		resp := &discoveryv3.DeltaDiscoveryResponse{TypeUrl: typeURL, SystemVersionInfo: strconv.Itoa(st.version),
			Resources: res, RemovedResources: slices.Sorted(maps.Keys(removed)), Nonce: strconv.Itoa(p.nonce)}
		p.s.deltaSent = appendBounded(p.s.deltaSent, resp)
		out = append(out, resp)
	}
	return out
}
