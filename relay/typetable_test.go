package relay

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// at is the state of typeURL, the zero S when the stream has none (tests).
func (t *typeTable[S]) at(typeURL string) S {
	s, _ := t.get(typeURL)
	return s
}

// A type table agrees with a map through random puts, and yields its
// types in type URL order.
func TestTypeTableAsAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var tt typeTable[int]
		want := map[string]int{}
		for i := range r.IntN(40) {
			url := fmt.Sprintf("type.googleapis.com/t%02d", r.IntN(20))
			tt.put(url, i)
			want[url] = i
		}
		if tt.len() != len(want) {
			t.Fatalf("round %d: %d types, want %d", round, tt.len(), len(want))
		}
		for url, v := range want {
			if got, ok := tt.get(url); !ok || got != v {
				t.Fatalf("round %d: %s = %d, %v; want %d", round, url, got, ok, v)
			}
		}
		if _, ok := tt.get("type.googleapis.com/absent"); ok {
			t.Fatalf("round %d: an absent type found", round)
		}
		got := map[string]int{}
		var order []string
		for url, v := range tt.all() {
			got[url] = v
			order = append(order, url)
		}
		if !maps.Equal(got, want) || !slices.IsSorted(order) {
			t.Fatalf("round %d: all() = %v in order %v, want %v sorted", round, got, order, want)
		}
	}
}
