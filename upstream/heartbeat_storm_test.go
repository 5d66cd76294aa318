package upstream

import (
	"fmt"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/shard/drop"
)

// TestSotWHeartbeatEchoIsNoStorm plays go-control-plane's snapshot cache
// with heartbeating: it answers each heartbeat's ACK with the unchanged
// state at the same version, and sends its next heartbeat only once that
// echo is ACKed. Every such ACK must go out at once (the backoff is an
// hour: a deferred ACK never comes, and the next request read is the
// heartbeat's), for many more heartbeats than StormRepeats. A storm of
// real repeats (each answering the ACK of the one before) is still damped.
func TestSotWHeartbeatEchoIsNoStorm(t *testing.T) {
	ss, drops := sotwDrops(t)
	state := func() []*anypb.Any {
		return []*anypb.Any{wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 3*time.Second), wrap(t, "b", &clusterv3.Cluster{Name: "b"}, 3*time.Second)}
	}
	sendACKed(t, ss, "v1", "n0", state()...)
	for i := range 4 * StormRepeats {
		sendACKed(t, ss, "v1", fmt.Sprintf("beat%d", i), wrap(t, "a", nil, 3*time.Second), wrap(t, "b", nil, 3*time.Second))
		sendACKed(t, ss, "v1", fmt.Sprintf("echo%d", i), state()...)
	}
	wantDrops(t, drops, nil)

	// Real repeats after an echo: the StormRepeats-th is not ACKed; the
	// next change supersedes it.
	for i := range StormRepeats - 1 {
		sendACKed(t, ss, "v1", fmt.Sprintf("repeat%d", i), state()...)
	}
	sendSotW(t, ss, "v1", "storm", state()...)
	sendSotW(t, ss, "v2", "new", wrap(t, "a", &clusterv3.Cluster{Name: "a"}, 3*time.Second))
	wantACK(t, ss.request(t), "v2", "new")
	wantDrops(t, drops, map[drop.Reason]uint64{drop.UpstreamRepeated: 1, drop.UpstreamReplySuperseded: 1})
}
