package shard

import "testing"

// With the upstream's version_info passed through (Update.Version), a
// shard's version is the upstream's as of the update that last changed its
// content: a version-only update changes nothing and tells nobody.
func TestUpstreamVersionPassedThrough(t *testing.T) {
	c, _ := newTestClass(t)
	w := &recorder{}
	c.ApplyUpdate(ClusterType, Update{Resources: []*Resource{res("a", "1")}, Kind: UpdateFull, Version: "v1"})
	s := c.Subscribe(ClusterType, NewSubscription(nil, true), w)
	if cur := s.Current(); cur.Version != "v1" || !cur.UpstreamVersioned {
		t.Fatalf("version %q (upstream %v), want v1", cur.Version, cur.UpstreamVersioned)
	}
	c.ApplyUpdate(ClusterType, Update{Resources: []*Resource{res("a", "1")}, Kind: UpdateFull, Version: "v2"})
	if got := w.take(); len(got) != 0 || s.Current().Version != "v1" {
		t.Fatalf("a version-only update told %d watchers, version %q; want none, v1", len(got), s.Current().Version)
	}
	c.ApplyUpdate(ClusterType, Update{Resources: []*Resource{res("a", "2")}, Kind: UpdateFull, Version: "v3"})
	if got := w.take(); len(got) != 1 || s.Current().Version != "v3" {
		t.Fatalf("a content change told %d watchers, version %q; want 1, v3", len(got), s.Current().Version)
	}
	// Without Version, content hashes.
	c.ApplyUpdate(ClusterType, Update{Resources: []*Resource{res("a", "3")}, Kind: UpdateFull})
	if cur := s.Current(); cur.Version == "v3" || cur.UpstreamVersioned || len(cur.Version) != 16 {
		t.Fatalf("version %q (upstream %v), want a content hash", cur.Version, cur.UpstreamVersioned)
	}
	c.Unsubscribe(s, w)
}
