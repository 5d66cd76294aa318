package xdstest

import (
	"maps"
	"slices"
	"strconv"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// swSotw is a SotW stream's state. A type is answered only while its
// latest request answers the latest response (an ACK, a NACK or the first
// request): a request with an older nonce is stale, its subscription is
// kept but it gets no response (spec: "The management server should not
// send a DiscoveryResponse for any DiscoveryRequest that has a stale
// nonce"). An answer goes when the subscription changed or a change
// concerned it; a NACK alone is recorded and answered by nothing until then.
type swSotw struct {
	s     *SiteWildcard
	nonce int // of the last response on the stream
	types map[string]*swSotwType
}

// swSotwType is a SotW stream's state of one type URL.
type swSotwType struct {
	swSub
	named     bool   // a non-empty resource_names came: no more legacy wildcard
	lastNonce string // of the last response of the type
	open      bool   // the latest request is fresh and unanswered
}

var _ swProtocol[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse] = (*swSotw)(nil)

func (p *swSotw) request(r *discoveryv3.DiscoveryRequest) {
	r = recordRequestLocked(p.s, &p.s.sotwReq, r)
	t := p.types[r.GetTypeUrl()]
	if t == nil {
		t = &swSotwType{swSub: swSub{names: map[string]bool{}, dirty: true}}
		p.types[r.GetTypeUrl()] = t
	}
	wildcard, names := false, map[string]bool{}
	if len(r.GetResourceNames()) == 0 {
		wildcard = !t.named // the legacy wildcard, or nothing
	} else {
		t.named = true
		for _, n := range r.GetResourceNames() {
			if n == "*" {
				wildcard = true
			} else {
				names[n] = true
			}
		}
	}
	if wildcard != t.wildcard || !maps.Equal(names, t.names) {
		t.dirty = true
	}
	t.wildcard, t.names = wildcard, names
	if r.GetResponseNonce() == t.lastNonce {
		t.open = true
	}
}

func (p *swSotw) changed(typeURL, name string, before, after *swEntry) bool {
	t := p.types[typeURL]
	return t != nil && t.mark(name, before, after) && t.open
}

// flush answers every open type with something to say: for Listener and
// Cluster the whole subscription (even empty), for other types the
// resources it covers (none: no answer).
func (p *swSotw) flush() []*discoveryv3.DiscoveryResponse {
	var out []*discoveryv3.DiscoveryResponse
	for _, typeURL := range slices.Sorted(maps.Keys(p.types)) {
		t := p.types[typeURL]
		if !t.open || !t.dirty {
			continue
		}
		st, res := t.take(p.s, typeURL)
		if len(res) == 0 && !FullState(typeURL) {
			continue
		}
		anys := []*anypb.Any{}
		for _, n := range slices.Sorted(maps.Keys(res)) {
			anys = append(anys, res[n].any)
		}
		p.nonce++
		resp := &discoveryv3.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: strconv.Itoa(st.version),
			Resources: anys, Nonce: strconv.Itoa(p.nonce)}
		t.lastNonce, t.open = resp.Nonce, false
		p.s.sotwSent = appendBounded(p.s.sotwSent, resp)
		out = append(out, resp)
	}
	return out
}
