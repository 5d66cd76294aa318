package app

import "fmt"

// validateAffinity checks the upstream.affinity keys: a class goes to one
// member of a tier named by upstream.address (resolved) or listed in
// upstream.members.
func (c *Config) validateAffinity(bad func(key, format string, args ...any)) {
	u := c.Upstream
	switch u.Affinity {
	case "none":
		if len(u.Members) > 0 {
			bad("upstream.members", "members of an affinity tier need upstream.affinity: class")
		}
		return
	case "class":
	default:
		bad("upstream.affinity", "must be none or class, got %q", u.Affinity)
		return
	}
	if u.AffinityReplicas != 1 {
		bad("upstream.affinity_replicas", "must be 1 (each class on one member; standby members are not built yet), got %d", u.AffinityReplicas)
	}
	if u.Address == "" {
		bad("upstream.address", "upstream.affinity: class needs upstream.address: the tier's name, resolved for its members unless upstream.members lists them")
	}
	if len(u.Fallbacks) > 0 {
		bad("upstream.fallbacks", "fallback control planes do not go with upstream.affinity: class: a failed member's classes move to the other members")
	}
	for i, a := range u.Members {
		if err := checkHostPort(a); err != nil {
			bad(fmt.Sprintf("upstream.members[%d]", i), "%v", err)
		}
	}
}
