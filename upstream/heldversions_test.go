package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unique"
	"unsafe"
)

// receivedString is s in a buffer of its own, as a parsed message's string
// would be: the caller may overwrite the buffer afterwards.
func receivedString(s string) (string, []byte) {
	b := []byte(s)
	return unsafe.String(unsafe.SliceData(b), len(b)), b
}

// heldMap is h as a map, checking that its entries are sorted by name and
// distinct.
func heldMap(t *testing.T, h *heldVersions) map[string]string {
	t.Helper()
	if !slices.IsSortedFunc(h.entries, func(a, b unique.Handle[heldVersion]) int {
		return strings.Compare(a.Value().name, b.Value().name)
	}) {
		t.Fatalf("entries not sorted by name")
	}
	got := maps.Collect(h.all())
	if len(got) != len(h.entries) {
		t.Fatalf("%d entries for %d names", len(h.entries), len(got))
	}
	return got
}

// TestHeldVersionsShareAcrossClasses: two classes holding the same names at
// the same versions hold one entry between them, and neither keeps the
// buffers the strings were parsed from.
func TestHeldVersionsShareAcrossClasses(t *testing.T) {
	a, b := &heldVersions{}, &heldVersions{}
	var bufs [][]byte
	for _, h := range []*heldVersions{a, b} {
		var set []heldVersion
		for i := range 3 {
			name, nb := receivedString(fmt.Sprint("cluster-", 2-i))
			version, vb := receivedString(fmt.Sprint("v", 2-i))
			set = append(set, heldVersion{name: name, version: version})
			bufs = append(bufs, nb, vb)
		}
		h.set(set)
	}
	for _, buf := range bufs {
		clear(buf) // the received message's buffer is reused
	}
	want := map[string]string{"cluster-0": "v0", "cluster-1": "v1", "cluster-2": "v2"}
	for _, h := range []*heldVersions{a, b} {
		if got := heldMap(t, h); !maps.Equal(got, want) {
			t.Fatalf("held %v, want %v", got, want)
		}
	}
	if !slices.Equal(a.entries, b.entries) {
		t.Fatal("the classes hold entries of their own")
	}
}

// TestHeldVersionsAsAMap: any sequence of sets and removals leaves what a
// map of names to versions would hold.
func TestHeldVersionsAsAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 14))
	h, want := &heldVersions{}, map[string]string{}
	name := func() string { return fmt.Sprint("r", rng.IntN(64)) }
	for step := range 2000 {
		switch rng.IntN(3) {
		case 0, 1: // a response: some names (maybe one twice: the last wins)
			set := make([]heldVersion, rng.IntN(8))
			for i := range set {
				set[i] = heldVersion{name: name(), version: fmt.Sprint("v", step, ".", i)}
				want[set[i].name] = set[i].version
			}
			h.set(set)
		case 2:
			names := make([]string, rng.IntN(4))
			for i := range names {
				names[i] = name()
				delete(want, names[i])
			}
			h.remove(names)
		}
		if got := heldMap(t, h); !maps.Equal(got, want) {
			t.Fatalf("step %d: held %v, want %v", step, got, want)
		}
		for i := range 64 {
			n := fmt.Sprint("r", i)
			if _, ok := want[n]; h.has(n) != ok {
				t.Fatalf("step %d: has(%s) = %v, want %v", step, n, !ok, ok)
			}
		}
	}
}

// A nil *heldVersions (a type the stream never got a response of) is empty.
func TestHeldVersionsNil(t *testing.T) {
	var h *heldVersions
	h.remove([]string{"a"})
	if h.has("a") || len(maps.Collect(h.all())) != 0 {
		t.Fatal("a nil heldVersions holds something")
	}
}

// Removing most names frees the slice's room for them.
func TestHeldVersionsRemoveShrinks(t *testing.T) {
	h := &heldVersions{}
	set := make([]heldVersion, 1000)
	names := make([]string, 0, len(set))
	for i := range set {
		set[i] = heldVersion{name: fmt.Sprintf("r%04d", i), version: "v"}
		names = append(names, set[i].name)
	}
	h.set(set)
	h.remove(names[10:])
	if len(h.entries) != 10 || cap(h.entries) > 2*10+64 {
		t.Fatalf("%d entries in a slice of %d", len(h.entries), cap(h.entries))
	}
}

// BenchmarkHeldVersions measures what a delta class stream's versions cost
// at issue 14's 100 classes × 1,000 clusters: every class holding the same
// names at go-control-plane's content-hash versions. Run it once:
// -benchtime 1x.
func BenchmarkHeldVersions(b *testing.B) {
	const classes, names = 100, 1000
	for b.Loop() {
		before := liveHeap()
		held := make([]*heldVersions, classes)
		for k := range held {
			held[k] = &heldVersions{}
			set := make([]heldVersion, names)
			for i := range set {
				sum := sha256.Sum256([]byte(fmt.Sprint("resource ", i)))
				set[i] = heldVersion{name: fmt.Sprintf("bench-cluster-%06d", i), version: hex.EncodeToString(sum[:])}
			}
			held[k].set(set)
		}
		after := liveHeap()
		b.ReportMetric(float64(after-before)/classes/1024, "KiB/class")
		b.ReportMetric(float64(after-before)/classes/names, "B/name/class")
		runtime.KeepAlive(held)
	}
}
