package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"runtime"
	"testing"
	"unsafe"
)

// received is s in a buffer of its own, as a parsed message's string would
// be: the caller may overwrite it afterwards.
func receivedString(s string) (string, []byte) {
	b := []byte(s)
	return unsafe.String(unsafe.SliceData(b), len(b)), b
}

// TestHeldVersionsShareAcrossClasses: two classes holding the same names at
// the same versions hold one copy of each string between them, and neither
// keeps the buffers the strings were parsed from.
func TestHeldVersionsShareAcrossClasses(t *testing.T) {
	a, b := heldVersions{}, heldVersions{}
	var bufs [][]byte
	for _, h := range []heldVersions{a, b} {
		for i := range 3 {
			name, nb := receivedString(fmt.Sprint("cluster-", i))
			version, vb := receivedString(fmt.Sprint("v", i))
			h.set(name, version)
			bufs = append(bufs, nb, vb)
		}
	}
	for _, buf := range bufs {
		clear(buf) // the received message's buffer is reused
	}
	want := map[string]string{"cluster-0": "v0", "cluster-1": "v1", "cluster-2": "v2"}
	for _, h := range []heldVersions{a, b} {
		if got := maps.Collect(h.all()); !maps.Equal(got, want) {
			t.Fatalf("held %v, want %v", got, want)
		}
	}
	for name, version := range a {
		other, ok := b[name] // the same handle: one canonical name
		if !ok {
			t.Fatalf("%s: two copies of the name", name.Value())
		}
		if other != version {
			t.Errorf("%s: two copies of the version", name.Value())
		}
	}
	if len(b) != len(a) {
		t.Fatalf("b holds %d names, a %d", len(b), len(a))
	}
}

func TestHeldVersionsSetReplaces(t *testing.T) {
	h := heldVersions{}
	h.set("c", "v1")
	h.set("c", "v2")
	if got := maps.Collect(h.all()); !maps.Equal(got, map[string]string{"c": "v2"}) {
		t.Fatalf("held %v, want c at v2", got)
	}
	if !h.has("c") || h.has("d") {
		t.Fatalf("has(c), has(d) = %v, %v; want true, false", h.has("c"), h.has("d"))
	}
	h.remove("c")
	h.remove("d") // not held: nothing
	if h.has("c") {
		t.Fatal("c still held after delete")
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
		held := make([]heldVersions, classes)
		for k := range held {
			held[k] = heldVersions{}
			for i := range names {
				sum := sha256.Sum256([]byte(fmt.Sprint("resource ", i)))
				held[k].set(fmt.Sprintf("bench-cluster-%06d", i), hex.EncodeToString(sum[:]))
			}
		}
		after := liveHeap()
		b.ReportMetric(float64(after-before)/classes/1024, "KiB/class")
		b.ReportMetric(float64(after-before)/classes/names, "B/name/class")
		runtime.KeepAlive(held)
	}
}
