package upstream

import (
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// StormRepeats is how many responses in a row, each answering an ACK and
// identical to the one before (same type, version and resources), make an
// upstream a storm: from then on the relay ACKs each repeat after a backoff
// delay instead of at once. Some control planes answer every ACK of a
// request they do not understand (go-control-plane's snapshot cache did for
// ["*"] outside ADS mode: tens of thousands of responses a second). A
// well-behaved upstream never answers an ACK with what it just sent.
const StormRepeats = 3

// stormWarnEvery limits the storm warning to one per type and stream per
// interval.
const stormWarnEvery = time.Minute

// repeated records an accepted response and reports whether its ACK must be
// deferred, and by how long: when it is the StormRepeats-th (or later)
// identical response in a row in answer to an ACK.
//
// Heartbeats are sent by a timer, not in answer to anything: they neither
// count nor reset. Nor does the response that answers a heartbeat's ACK
// with the state it refreshed (go-control-plane's snapshot cache re-sends
// it, and sends its next heartbeat only once that echo is ACKed): deferring
// that ACK would starve the heartbeats, and with them every client's TTL.
// A repeat answering the echo's ACK is a repeat again.
func (ss *sotwSession) repeated(ts *sotwTypeState, resp *wire.RawResponse, heartbeatOnly bool) (time.Duration, bool) {
	if heartbeatOnly {
		ts.afterBeat = true
		return 0, false
	}
	echo := ts.afterBeat
	ts.afterBeat = false
	digest := resourcesDigest(resp.Resources)
	same := ts.accepted && ts.pureACK && ts.lastVersion == resp.VersionInfo && ts.lastDigest == digest
	if same && echo {
		return 0, false
	}
	ts.lastVersion, ts.lastDigest, ts.accepted = resp.VersionInfo, digest, true
	if !same {
		ts.same = 0
		return 0, false
	}
	ts.same++
	if ts.same < StormRepeats {
		return 0, false
	}
	ss.metrics.RepeatedResponse(ss.class.Name, resp.TypeURL)
	ss.drops.Add(drop.UpstreamRepeated)
	delay := ss.bo.Delay(ts.same - StormRepeats)
	if now := time.Now(); now.Sub(ts.warnedAt) >= stormWarnEvery {
		ts.warnedAt = now
		ss.log.Warn("upstream answers every ACK with the response it just sent; delaying the ACKs",
			ss.field("type_url", resp.TypeURL), ss.field("version", resp.VersionInfo),
			zap.Int("resources", len(resp.Resources)), zap.Int("repeats", ts.same), zap.Duration("delay", delay))
	}
	return delay, true
}

// resourcesDigest is a digest of a response's resources that does not depend
// on their order (go-control-plane lists them in map order).
func resourcesDigest(resources [][]byte) uint64 {
	sum := uint64(len(resources))
	for _, r := range resources {
		sum += xxhash.Sum64(r)
	}
	return sum
}
