package upstream

import (
	"sync"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// sotwScratch is what handling one SotW response needs only while it is
// handled: the parsed envelope, the candidates, the name set that finds
// duplicates, the resources' hashes and the set of those found held
// (sotwFast), and the validated resources' slice. Every class's response
// needs them, so they are pooled rather than made (and collected) per
// response: a 1,000-resource response's are about 200 KB.
type sotwScratch struct {
	resp   wire.RawResponse
	cands  []candidate
	seen   map[string]struct{}
	hashes []uint64
	met    resourceSet
	out    []*shard.Resource
}

// maxPooledResources: a scratch that held more resources is left to the
// collector rather than kept at that size for every later response.
const maxPooledResources = 1 << 14

var sotwScratches = sync.Pool{New: func() any { return &sotwScratch{seen: map[string]struct{}{}} }}

func getSotwScratch() *sotwScratch { return sotwScratches.Get().(*sotwScratch) }

// validate checks the resources of sc.resp (see unwrapSotW and
// validator.resources; validator.sotwFast first) into sc.out and returns
// the response's heartbeats.
func (sc *sotwScratch) validate(v *validator) ([]shard.HeartbeatEntry, error) {
	sc.out = sc.out[:0]
	if v.sotwFast(sc) {
		return nil, nil
	}
	clear(sc.out) // what the fast path found is validated again
	out := sc.out[:0]
	sc.out = out
	cands, beats, err := unwrapSotWInto(sc.resp.Resources, sc.cands)
	if err != nil {
		return nil, err
	}
	sc.cands = cands
	out, err = v.resourcesInto(sc.resp.TypeURL, cands, out, sc.seen)
	if err != nil {
		return nil, err
	}
	sc.out = out
	return beats, nil
}

// release clears what aliases the received message or holds resources, and
// pools sc.
func (sc *sotwScratch) release() {
	if len(sc.resp.Resources) > maxPooledResources || len(sc.seen) > maxPooledResources {
		return
	}
	clear(sc.resp.Resources)
	sc.resp = wire.RawResponse{Resources: sc.resp.Resources[:0]}
	clear(sc.cands[:cap(sc.cands)])
	sc.cands = sc.cands[:0]
	clear(sc.seen)
	clear(sc.out[:cap(sc.out)])
	sc.out = sc.out[:0]
	sotwScratches.Put(sc)
}
