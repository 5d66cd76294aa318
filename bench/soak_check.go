package bench

import (
	"fmt"
	"maps"
	"slices"
)

// checkClients compares every client with its class's upstream state: all four
// types, names and content, exactly. Route configurations and load
// assignments are those the class's listeners and clusters name; a client
// forgets what it unsubscribes (as Envoy does), so the relay's removal
// rule — from a SotW upstream it cannot report a deleted RouteConfiguration
// or ClusterLoadAssignment — needs no allowance: such a resource is
// unsubscribed when its parent goes, and must then be gone from the client.
// Its RDS and EDS subscriptions must be exactly the names needed.
func checkClients(u *Upstream, clients []*ProxyClient) ([]string, error) {
	expected, err := u.Expected()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range clients {
		want := expected[c.Class]
		got, subs := c.State()
		var problems []string
		if d := Diff(got, want, 5); d != "" {
			problems = append(problems, d)
		}
		for _, t := range dependentTypes {
			if need := slices.Sorted(maps.Keys(want[t])); !slices.Equal(subs[t], need) {
				problems = append(problems, fmt.Sprintf("%s subscription %d names, want %d", t, len(subs[t]), len(need)))
			}
		}
		if len(problems) > 0 {
			proto := "sotw"
			if c.Delta {
				proto = "delta"
			}
			out = append(out, fmt.Sprintf("client %d (%s, %s): %v", c.ID, proto, c.Class, problems))
		}
	}
	return out, nil
}
