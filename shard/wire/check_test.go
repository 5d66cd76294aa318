package wire

import "testing"

// A checker accepts exactly the body the builders make from the same calls.
func TestBodyCheckerMatchesBuilders(t *testing.T) {
	anys := [][]byte{AppendAny(nil, "t/x", []byte("a")), AppendAny(nil, "t/x", []byte("bb"))}
	bb := NewBodyBuilder("v1", 0)
	for _, a := range anys {
		bb.AddResource(a)
	}
	sotw := NewBody(bb.Finish("t/x"))
	db := NewDeltaBodyBuilder("v1", 0)
	db.AddEntry(DeltaEntry("a", "1", []string{"al"}, anys[0], []byte{8, 1}))
	db.AddEntry(DeltaEntry("b", "", nil, anys[1], nil))
	db.AddRemoved("gone")
	delta := NewBody(db.Finish("t/x"))

	checkSotW := func(b Body, version, typeURL string, anys ...[]byte) bool {
		c := CheckBody(b, version)
		for _, a := range anys {
			c.AddResource(a)
		}
		return c.Finish(typeURL)
	}
	checkDelta := func(b Body, name0, ver0 string, removed ...string) bool {
		c := CheckBody(b, "v1")
		c.AddDeltaResource(name0, ver0, []string{"al"}, anys[0], []byte{8, 1})
		c.AddDeltaResource("b", "", nil, anys[1], nil)
		for _, r := range removed {
			c.AddRemoved(r)
		}
		return c.Finish("t/x")
	}
	for _, c := range []struct {
		name string
		got  bool
		want bool
	}{
		{"sotw, same", checkSotW(sotw, "v1", "t/x", anys...), true},
		{"sotw, other version", checkSotW(sotw, "v2", "t/x", anys...), false},
		{"sotw, other type", checkSotW(sotw, "v1", "t/y", anys...), false},
		{"sotw, a resource less", checkSotW(sotw, "v1", "t/x", anys[0]), false},
		{"sotw, a resource more", checkSotW(sotw, "v1", "t/x", anys[0], anys[1], anys[1]), false},
		{"sotw, other order", checkSotW(sotw, "v1", "t/x", anys[1], anys[0]), false},
		{"sotw, nil body", checkSotW(Body{}, "v1", "t/x", anys...), false},
		{"delta, same", checkDelta(delta, "a", "1", "gone"), true},
		{"delta, other name", checkDelta(delta, "c", "1", "gone"), false},
		{"delta, other resource version", checkDelta(delta, "a", "2", "gone"), false},
		{"delta, no removal", checkDelta(delta, "a", "1"), false},
		{"delta as sotw", checkSotW(delta, "v1", "t/x", anys...), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: matched %v, want %v", c.name, c.got, c.want)
		}
	}
}

// Checking a body allocates nothing per resource (at most the checker).
func TestBodyCheckerAllocations(t *testing.T) {
	a := AppendAny(nil, "t/x", make([]byte, 100))
	bb := NewBodyBuilder("v1", 0)
	for range 100 {
		bb.AddResource(a)
	}
	b := NewBody(bb.Finish("t/x"))
	allocs := testing.AllocsPerRun(100, func() {
		c := CheckBody(b, "v1")
		for range 100 {
			c.AddResource(a)
		}
		if !c.Finish("t/x") {
			t.Fatal("no match")
		}
	})
	if allocs > 1 {
		t.Fatalf("checking 100 resources allocates %v times, want at most 1 (the checker)", allocs)
	}
}
