package bench

import "testing"

func TestSoakStreamsProblem(t *testing.T) {
	for _, tc := range []struct {
		name     string
		streams  []int
		restarts int
		bad      bool
	}{
		{"one per class", []int{2, 2, 2}, 0, false},
		{"a chosen restart", []int{2, 3, 2}, 1, false},
		{"fewer chosen than counted", []int{2, 3, 2}, 2, false},
		{"an extra stream", []int{2, 3, 2}, 0, true},
		{"a class without a stream", []int{2, 1, 3}, 1, true},
	} {
		r := SoakResult{Classes: 2, UpstreamStreams: tc.streams, ChosenRestarts: tc.restarts}
		if got := r.StreamsProblem(); (got != "") != tc.bad {
			t.Errorf("%s: StreamsProblem() = %q, want a problem: %v", tc.name, got, tc.bad)
		}
	}
}
