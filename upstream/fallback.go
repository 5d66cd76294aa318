package upstream

import (
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/shard"
)

// NamesSilenceGrace is how long a SotW request naming resources, the first
// of its type on a stream (so it claims no version), may stay unanswered
// before the class stream stops asking for the type by name and asks for
// the wildcard instead.
//
// A control plane that answers names answers such a request at once, even
// when none of the names exists (go-control-plane's linear cache and its
// snapshot cache outside ADS mode answer any request without a version;
// istiod answers every request of a new stream). go-control-plane's
// snapshot cache in ADS mode answers a named request only when it names
// every resource of the type in the snapshot, so a class asking for some
// of them would never be answered: behind it the type is asked for as the
// legacy wildcard, and the class's named shards are served from what it
// sends.
//
// It is shorter than shard.PendingGrace: the class is told of the wildcard
// when the fallback engages, which ends the names' wait before its grace
// would serve them as absent (they exist; the wildcard's answer says so).
const NamesSilenceGrace = shard.PendingGrace * 3 / 4

// maxLoggedNames bounds the names the fallback's log line lists: the names
// come from clients' subscriptions (up to limits.max_class_names_per_type).
const maxLoggedNames = 5

// armSilence starts the wait for an answer to a named request that claims
// no version, unless one runs or the type was answered on this stream.
func (ss *sotwSession) armSilence(ts *sotwTypeState) {
	if ts.silence != nil || ts.nonce != "" {
		return
	}
	ts.silentAt = time.Now().Add(NamesSilenceGrace)
	ts.silence = time.AfterFunc(NamesSilenceGrace, ss.due.Notify)
}

// answered ends the wait for an answer: the upstream answered the type on
// this stream (whatever it said, it answers requests by name).
func (ts *sotwTypeState) answered() {
	if ts.silence != nil {
		ts.silence.Stop()
		ts.silence = nil
	}
}

// fallBackIfSilent engages the wildcard fallback when a type's named request
// went unanswered through NamesSilenceGrace: it records, for the life of the
// class stream, every type whose named request is still unanswered on this
// stream (the silence of one shows how this upstream treats names, and the
// restart would re-ask the others by name, restarting their wait while the
// class's pending names keep their deadlines), tells the class that the
// wildcard is asked for them (its pending names stop waiting for a
// by-name answer; its shards wait for the wildcard's), and ends the stream
// with a *wildcardRestart: names were sent for the type, so the legacy
// wildcard can only be asked on a new stream.
func (ss *sotwSession) fallBackIfSilent(now time.Time) error {
	due := false
	for _, ts := range ss.types {
		if ts.silence != nil && !now.Before(ts.silentAt) {
			due = true
		}
	}
	if !due {
		return nil
	}
	var first string
	for typeURL, ts := range ss.types {
		if ts.silence == nil {
			continue
		}
		ts.answered()
		ss.namesIgnored[typeURL] = true
		ss.log.Info("the upstream does not answer requests for this type by name: asking for the wildcard and filtering in the relay, which now holds every resource of the type",
			zap.String("type_url", typeURL), zap.Int("unanswered_names", len(ts.sub.Names)),
			zap.Strings("first_names", ts.sub.Names[:min(len(ts.sub.Names), maxLoggedNames)]), zap.Duration("after", NamesSilenceGrace))
		ss.metrics.NamesIgnored(ss.class.Name, typeURL)
		ss.class.Requested(typeURL, shard.Subscription{Wildcard: true}, false)
		delete(ss.versions, typeURL)
		if first == "" || typeURL < first {
			first = typeURL
		}
	}
	return &wildcardRestart{typeURL: first, namesIgnored: true}
}
