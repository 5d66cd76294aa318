package bench

import (
	"bytes"

	"github.com/cespare/xxhash/v2"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// payloads are the encoded, nonce-less response bodies of one CDS state, as
// the relay would send them: built once and written unchanged to every
// stream of the limit and tcp targets.
type payloads struct {
	sotw      wire.Body // full SotW DiscoveryResponse body
	deltaFull wire.Body // every cluster: what a new delta stream is sent
	deltaDiff wire.Body // the clusters changed since the previous state
	anys      [][]byte
}

// encodeState encodes the same synthetic clusters the control plane serves
// (n clusters, changed as in ControlPlane.SetClusters). prev is the previous
// state (nil: none), against which the delta diff is computed. Versions are
// content hashes of the relay's length.
func encodeState(n, changed int, prev *payloads) (*payloads, error) {
	return encodeClassState(Workload{Classes: 1, Clusters: n, Overlap: 1}, 0, changed, prev)
}

// encodeClassState encodes class k's state of workload w (as
// ControlPlane.SetClasses installs it).
func encodeClassState(w Workload, k, changed int, prev *payloads) (*payloads, error) {
	n := w.Clusters
	p := &payloads{anys: make([][]byte, n)}
	sum := xxhash.New()
	size := 0
	for i := range n {
		b, err := marshalAny(w.Cluster(k, i, i == changed))
		if err != nil {
			return nil, err
		}
		p.anys[i] = b
		_, _ = sum.Write(b)
		size += len(b)
	}
	version := dedup.Version(sum.Sum64())
	bb := wire.NewBodyBuilder(version, size)
	full := wire.NewDeltaBodyBuilder(version, size)
	diff := wire.NewDeltaBodyBuilder(version, 0)
	for i, a := range p.anys {
		bb.AddResource(a)
		entry := wire.DeltaEntry(clusterName(i), dedup.Version(xxhash.Sum64(a)), nil, a, nil)
		full.AddEntry(entry)
		if prev == nil || i >= len(prev.anys) || !bytes.Equal(prev.anys[i], a) {
			diff.AddEntry(entry)
		}
	}
	if prev != nil {
		for i := n; i < len(prev.anys); i++ {
			diff.AddRemoved(clusterName(i))
		}
	}
	// Converted for gRPC once, as the relay does, so no target pays a
	// per-stream conversion.
	p.sotw = wire.NewBody(bb.Finish(ClusterType))
	p.deltaFull = wire.NewBody(full.Finish(ClusterType))
	p.deltaDiff = wire.NewBody(diff.Finish(ClusterType))
	return p, nil
}

// encodeAssignment is churn update seq's SotW EDS body, as the relay would
// send it.
func encodeAssignment(seq int) (wire.Body, error) {
	a, err := marshalAny(Assignment(seq))
	if err != nil {
		return wire.Body{}, err
	}
	bb := wire.NewBodyBuilder(dedup.Version(xxhash.Sum64(a)), len(a))
	bb.AddResource(a)
	return wire.NewBody(bb.Finish(EndpointType)), nil
}
