package app

import (
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/upstream"
)

func TestAffinityDefaults(t *testing.T) {
	cfg, err := ParseConfig("relay.yaml", []byte("upstream:\n  address: core.xds.svc:18000\n"))
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Upstream
	if u.Affinity != "none" || u.AffinityReplicas != 1 || u.Members != nil || u.ResolveInterval != upstream.DefaultResolveInterval {
		t.Fatalf("defaults: affinity %q, replicas %d, members %v, resolve %v; want none, 1, none, 30s", u.Affinity, u.AffinityReplicas, u.Members, u.ResolveInterval)
	}
	cfg, err = ParseConfig("relay.yaml", []byte("upstream:\n  address: core:1\n  affinity: class\n  members: [127.0.0.1:1, 127.0.0.1:2]\n  resolve_interval: 5s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.Upstream; u.Affinity != "class" || len(u.Members) != 2 || u.ResolveInterval != 5*time.Second {
		t.Fatalf("parsed %+v", u)
	}
}

// Each bad affinity setting is reported at its key and line.
func TestAffinityConfigErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"upstream:\n  address: x:1\n  affinity: pod\n", "relay.yaml:3: upstream.affinity: must be none or class, got \"pod\""},
		{"upstream:\n  address: x:1\n  affinity: class\n  affinity_replicas: 2\n", "relay.yaml:4: upstream.affinity_replicas: must be 1"},
		{"upstream:\n  address: x:1\n  members: [127.0.0.1:1]\n", "relay.yaml:3: upstream.members: members of an affinity tier need upstream.affinity: class"},
		{"upstream:\n  address: x:1\n  affinity: class\n  members:\n    - 127.0.0.1:1\n    - nope\n", "relay.yaml:6: upstream.members[1]: not HOST:PORT"},
		{"upstream:\n  address: x:1\n  fallbacks: [y:1]\n  affinity: class\n", "relay.yaml:3: upstream.fallbacks: fallback control planes do not go with upstream.affinity: class"},
		{"upstream:\n  affinity: class\n  members: [127.0.0.1:1]\n", "relay.yaml:1: upstream.address: upstream.affinity: class needs upstream.address"},
		{"upstream:\n  address: x:1\n  affinity: class\n  resolve_interval: -1s\n", "relay.yaml:4: upstream.resolve_interval:"},
	} {
		_, err := ParseConfig("relay.yaml", []byte(c.yaml))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: got %v, want prefix %q", c.yaml, err, c.want)
		}
	}
}
