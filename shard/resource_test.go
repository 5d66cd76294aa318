package shard

import (
	"slices"
	"testing"
	"unsafe"
)

// inside reports whether s's bytes are part of b's.
func inside(s string, b []byte) bool {
	if s == "" {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(b))
}

// A resource's name and children are the strings its Any bytes hold, not
// copies; names the bytes do not hold are kept as given.
func TestNewResourceSharesItsBytes(t *testing.T) {
	raw := []byte("\x0a\x05typeA\x12\x20\x0a\x04name\x12\x06child1\x12\x06child2")
	for _, tc := range []struct {
		children []string
		shared   bool
	}{
		{nil, false},
		{[]string{"child1"}, true},
		{[]string{"child1", "child2"}, true},
		{[]string{"elsewhere"}, false},
	} {
		r := NewResource(string([]byte("name")), raw, 1, nil, slices.Clone(tc.children), nil)
		if r.Name != "name" || !inside(r.Name, raw) {
			t.Errorf("name %q not within the Any bytes", r.Name)
		}
		if got := r.Children(); !slices.Equal(got, tc.children) {
			t.Errorf("children %q, want %q", got, tc.children)
		}
		for _, c := range r.Children() {
			if inside(c, raw) != tc.shared {
				t.Errorf("child %q within the Any bytes: %v, want %v", c, !tc.shared, tc.shared)
			}
		}
		if r.Rare != nil && len(tc.children) < 2 {
			t.Errorf("a plain resource of %d children has a rare part", len(tc.children))
		}
	}
}

// A resource with a TTL, aliases or a version has them in its rare part,
// and one with none has none.
func TestNewRare(t *testing.T) {
	if NewRare(nil, nil, "") != nil {
		t.Fatal("NewRare of nothing is not nil")
	}
	r := &Resource{Name: "a", Any: []byte("x"), Rare: NewRare([]string{"b"}, []byte{8, 1}, "v")}
	if r.Plain() || !slices.Equal(r.Aliases(), []string{"b"}) || string(r.TTL()) != "\x08\x01" || r.UpstreamVersion() != "v" || r.Version() != "v" {
		t.Fatalf("rare part read back as aliases %q ttl %x version %q", r.Aliases(), r.TTL(), r.UpstreamVersion())
	}
	if p := (&Resource{Name: "a"}); !p.Plain() || p.Aliases() != nil || p.TTL() != nil || p.UpstreamVersion() != "" {
		t.Fatal("a resource without a rare part is not plain")
	}
}

// A cached name list holds names of its own, not the resources' (whose
// names share their bytes): it outlives them.
func TestNameListOwnsItsNames(t *testing.T) {
	raw := []byte("..list-owns-a..list-owns-b..")
	a := NewResource("list-owns-a", raw, 1, nil, nil, nil)
	b := NewResource("list-owns-b", raw, 2, nil, nil, nil)
	l := nameLists.share([]string{a.Name, b.Name})
	if !slices.Equal(l.names, []string{"list-owns-a", "list-owns-b"}) {
		t.Fatalf("list %q", l.names)
	}
	for _, n := range l.names {
		if inside(n, raw) {
			t.Fatalf("listed name %q is a resource's bytes", n)
		}
	}
}

// The resource record stays at its size class: what is held per distinct
// resource.
func TestResourceSize(t *testing.T) {
	if got := unsafe.Sizeof(Resource{}); got > 80 {
		t.Fatalf("Resource is %d bytes, want at most 80", got)
	}
}
