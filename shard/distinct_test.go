package shard

import (
	"slices"
	"testing"
)

// A full-state update whose names the source checked distinct finds its
// deletions by counting: every resource held that the update lacks is
// deleted, whether the update's count differs from what was held or not,
// and a heartbeat repeating one of the update's names (which the count
// would miss) does not hide a deletion.
func TestApplyDistinctFindsDeletions(t *testing.T) {
	c, _ := newTestClass(t)
	all := c.Subscribe(ClusterType, NewSubscription(nil, true), &recorder{})
	full := func(u Update) {
		t.Helper()
		u.Kind, u.Distinct = UpdateFull, true
		c.ApplyUpdate(ClusterType, u)
	}
	held := func() []string { return all.Current().Names }
	steps := []struct {
		name string
		u    Update
		want []string
	}{
		{"first", Update{Resources: []*Resource{res("a", "1"), res("b", "1"), res("c", "1")}}, []string{"a", "b", "c"}},
		{"one fewer", Update{Resources: []*Resource{res("a", "1"), res("b", "1")}}, []string{"a", "b"}},
		{"as many, one replaced", Update{Resources: []*Resource{res("a", "1"), res("d", "1")}}, []string{"a", "d"}},
		{"as many, all changed", Update{Resources: []*Resource{res("a", "2"), res("d", "2")}}, []string{"a", "d"}},
		{"a heartbeat for a name of the update", Update{Resources: []*Resource{resTTL("a", "2", "30s")}, Heartbeats: []HeartbeatEntry{{Name: "a", TTL: []byte("30s")}}}, []string{"a"}},
		{"one held and its heartbeat, another gone", Update{Resources: []*Resource{resTTL("a", "2", "30s"), res("e", "1")}}, []string{"a", "e"}},
		{"a heartbeat for it again", Update{Resources: []*Resource{resTTL("a", "2", "30s")}, Heartbeats: []HeartbeatEntry{{Name: "a", TTL: []byte("30s")}}}, []string{"a"}},
		{"empty", Update{}, nil},
	}
	for _, st := range steps {
		full(st.u)
		if got := held(); !slices.Equal(got, st.want) {
			t.Fatalf("%s: shard holds %v, want %v", st.name, got, st.want)
		}
	}
}
