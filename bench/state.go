package bench

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// State is a configuration as a proxy holds it: per type URL, resource name
// → content hash (xxhash of the resource's encoded bytes, which the relay
// passes through unchanged from the control plane).
type State map[string]map[string]uint64

// ContentHash is the hash State keeps of a resource's encoded bytes.
func ContentHash(encoded []byte) uint64 { return xxhash.Sum64(encoded) }

// entryDigest is one held resource's share of a state digest.
func entryDigest(typeURL, name string, hash uint64) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(typeURL)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(name)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], hash)
	_, _ = d.Write(b[:])
	return d.Sum64()
}

// Digest is an order-independent digest of s (XOR of its entries), which a
// client keeps up to date per change in O(1).
func (s State) Digest() uint64 {
	var d uint64
	for t, names := range s {
		for n, h := range names {
			d ^= entryDigest(t, n, h)
		}
	}
	return d
}

// ExpectedState is what a proxy following cfg's dependency chain holds
// when in sync: every listener and cluster, the route configurations its
// listeners name and the load assignments its clusters name.
func ExpectedState(cfg *Config) (State, error) {
	res := cfg.Resources()
	out := State{}
	for _, t := range xdsTypes {
		out[t] = map[string]uint64{}
		for _, r := range res[t] {
			b, err := cache.MarshalResource(r)
			if err != nil {
				return nil, err
			}
			out[t][cache.GetResourceName(r)] = ContentHash(b)
		}
	}
	// Keep only what the chain reaches (a configuration may hold unused
	// routes or assignments; a proxy never asks for them).
	var rds, eds []string
	for _, r := range res[ListenerType] {
		b, _ := cache.MarshalResource(r)
		rds = append(rds, dependencies(ListenerType, b)...)
	}
	for _, r := range res[ClusterType] {
		b, _ := cache.MarshalResource(r)
		eds = append(eds, dependencies(ClusterType, b)...)
	}
	keepOnly(out[RouteType], rds)
	keepOnly(out[EndpointType], eds)
	return out, nil
}

func keepOnly(m map[string]uint64, names []string) {
	for n := range m {
		if !slices.Contains(names, n) {
			delete(m, n)
		}
	}
}

// Diff describes how got differs from want, type by type (at most limit
// names listed per kind of difference); empty when equal.
func Diff(got, want State, limit int) string {
	var b strings.Builder
	for _, t := range xdsTypes {
		var missing, extra, differ []string
		for _, n := range slices.Sorted(maps.Keys(want[t])) {
			if h, ok := got[t][n]; !ok {
				missing = append(missing, n)
			} else if h != want[t][n] {
				differ = append(differ, n)
			}
		}
		for _, n := range slices.Sorted(maps.Keys(got[t])) {
			if _, ok := want[t][n]; !ok {
				extra = append(extra, n)
			}
		}
		short := t[strings.LastIndexByte(t, '.')+1:]
		for _, d := range []struct {
			what  string
			names []string
		}{{"missing", missing}, {"stale content", differ}, {"extra", extra}} {
			if len(d.names) > 0 {
				fmt.Fprintf(&b, " %s %s %d %s;", short, d.what, len(d.names), clip(d.names, limit))
			}
		}
	}
	return strings.TrimSpace(b.String())
}

func clip(names []string, limit int) []string {
	if len(names) > limit {
		return append(slices.Clone(names[:limit]), "…")
	}
	return names
}
