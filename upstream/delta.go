package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/drop"
	"github.com/xds-relay/xds-relay/shard/wire"
)

// deltaSession is the incremental protocol of one upstream stream: the relay
// subscribes and unsubscribes per name instead of re-sending the union, and
// installs the upstream's per-resource updates and removals.
type deltaSession struct {
	// Read-only after creation.
	*classStream
	stream grpc.ClientStream

	// Owned by the run goroutine.
	types map[string]*deltaTypeState
	first bool // the next request is the stream's first and carries the node
}

// deltaTypeState is what one delta stream subscribed to for a type URL.
// Owned by the run goroutine.
type deltaTypeState struct {
	sub  shard.Subscription
	good bool // a response of the type was accepted on this stream
	// unsubscribed: the names the stream unsubscribed from less than
	// resubscribeWindow ago, and when, the wildcard not subscribed (under
	// it, the upstream keeps every name current). None is subscribed again
	// on the stream within the window (see resubscribeRestart); at most
	// maxUnsubscribed, then the stream is restarted to forget them.
	unsubscribed map[string]time.Time
}

// maxUnsubscribed bounds a stream's recently unsubscribed names per type: a
// stream unsubscribing more within resubscribeWindow restarts to forget
// them.
const maxUnsubscribed = 1 << 16

// resubscribeWindow is how long after an unsubscription an answer the
// upstream sent before reading it may still arrive: many round trips, the
// same bound as the SotW shadow's (shard.ShadowHold). A name subscribed
// again later is asked with "+[name]": any such answer came, and was
// dropped, while the name was not asked for.
const resubscribeWindow = shard.ShadowHold

// unsubscribe records the names of unsub (a request's
// resource_names_unsubscribe, "*" aside) as unsubscribed at now, forgets
// those unsubscribed resubscribeWindow ago or more, and reports whether
// the rest exceed maxUnsubscribed.
func (ts *deltaTypeState) unsubscribe(unsub []string, now time.Time) (overflow bool) {
	for _, n := range unsub {
		if n == shard.Wildcard {
			continue
		}
		if ts.unsubscribed == nil {
			ts.unsubscribed = map[string]time.Time{}
		}
		ts.unsubscribed[n] = now
	}
	if len(ts.unsubscribed) > maxUnsubscribed {
		maps.DeleteFunc(ts.unsubscribed, func(_ string, at time.Time) bool { return now.Sub(at) >= resubscribeWindow })
	}
	return len(ts.unsubscribed) > maxUnsubscribed
}

// resubscribes returns a name want adds to the stream's subscription that
// the stream unsubscribed from less than resubscribeWindow before now.
func (ts *deltaTypeState) resubscribes(want shard.Subscription, siteWild bool, now time.Time) (string, bool) {
	if len(ts.unsubscribed) == 0 || !siteWild && (ts.sub.Wildcard || want.Wildcard) {
		return "", false // a wildcard keeps every name current (unless site-specific)
	}
	for _, n := range want.Added(ts.sub) {
		if at, ok := ts.unsubscribed[n]; ok {
			if now.Sub(at) < resubscribeWindow {
				return n, true
			}
			delete(ts.unsubscribed, n)
		}
	}
	return "", false
}

var _ protocolSession = (*deltaSession)(nil)

func newDeltaSession(s *classStream, st grpc.ClientStream) *deltaSession {
	return &deltaSession{classStream: s, stream: st, types: map[string]*deltaTypeState{}, first: true}
}

// A control plane speaking delta does not re-send a rejected update by
// itself, so NACKs are never deferred; nor does it answer an ACK.
func (ds *deltaSession) replyDue() <-chan struct{} { return nil }
func (ds *deltaSession) sendDueReplies() error     { return nil }
func (ds *deltaSession) close()                    {}

// syncInterest sends, per type, the names to subscribe and unsubscribe that
// make the stream's subscription the class's union interest. The first
// request of a type carries the versions the relay already holds, so an
// upstream that supports it sends only what changed (spec: reconnect).
func (ds *deltaSession) syncInterest() error {
	for _, typeURL := range ds.class.TypeURLs() {
		want := ds.class.Interest(typeURL)
		if ds.askWild && !want.Empty() {
			want = shard.Subscription{Wildcard: true} // names are selected in the relay
		}
		ts := ds.types[typeURL]
		req := &discoverygrpc.DeltaDiscoveryRequest{TypeUrl: typeURL}
		switch {
		case ts != nil && want.Wildcard && !ts.sub.Wildcard:
			// A wildcard after names is asked on a new stream, whose first
			// request declares exactly what the relay holds: go-control-plane
			// records an answer as sent when it sends it, so one in flight
			// across an unsubscription (its resource deleted since) would
			// never be reported removed to a "+[*]" on this stream.
			return &wildcardRestart{typeURL: typeURL}
		case ts == nil:
			if want.Empty() {
				// This stream asks nothing of the type: the class may drop
				// what an earlier stream was asked for (and free the type),
				// and its versions are not claimed on a later subscription.
				ds.forget(typeURL, ds.class.Requested(typeURL, want, true))
				continue
			}
			ts = &deltaTypeState{}
			ds.types[typeURL] = ts
			req.InitialResourceVersions = ds.claims(typeURL, want)
		default:
			if name, held := ds.heldNotSubscribed(typeURL, ts.sub, want); held {
				return &claimRestart{typeURL: typeURL, name: name}
			}
			if name, again := ts.resubscribes(want, ds.siteWild, time.Now()); again {
				return &resubscribeRestart{typeURL: typeURL, name: name}
			}
		}
		if ts.sub.Wildcard {
			// Kept for the stream's life, like SotW's legacy wildcard:
			// go-control-plane would not resend what it believes the
			// stream holds when "*" is subscribed again.
			want.Wildcard = true
		}
		req.ResourceNamesSubscribe, req.ResourceNamesUnsubscribe = subscriptionDiff(ts.sub, want)
		if len(req.ResourceNamesSubscribe) == 0 && len(req.ResourceNamesUnsubscribe) == 0 && ts.sub.Equal(want) && req.InitialResourceVersions == nil {
			continue
		}
		// A subscription change is no ACK or NACK: it carries no nonce
		// (spec; istiod ignores a request whose nonce is not its latest).
		ts.sub = want
		if err := ds.send(req); err != nil {
			return err
		}
		// The versions go with the resources: forgotten exactly when the
		// class drops them, once the upstream was told. Were they forgotten
		// before (the send failed, or a shard subscribed again meanwhile and
		// the class kept it), the class would hold a resource a later stream
		// does not claim: go-control-plane reports the deletion only of what
		// a stream claims.
		ds.forget(typeURL, ds.class.Requested(typeURL, want, true))
		if (!want.Wildcard || ds.siteWild) && ts.unsubscribe(req.ResourceNamesUnsubscribe, time.Now()) {
			return &resubscribeRestart{typeURL: typeURL, overflow: true}
		}
	}
	return nil
}

// resubscribeRestart ends a session that would subscribe again to a name it
// unsubscribed from less than resubscribeWindow ago. An answer the upstream sent before it read the
// unsubscription may still be on its way; arriving after the new "+[name]",
// it would be taken for that subscription's answer, and go-control-plane,
// having forgotten at the unsubscription what it sent, reports no deletion
// made meanwhile: the class would serve the deleted resource for ever
// (conformance snapshot-ads-delta-deleted-route-held.json). No delta
// message tells when the upstream read an unsubscription, so the name is
// asked for on a new stream, whose first request claims what the class
// holds; nothing the old stream sent reaches the class after it.
//
// overflow: the stream unsubscribed more than maxUnsubscribed names of the
// type, and is restarted to forget them.
type resubscribeRestart struct {
	typeURL, name string
	overflow      bool
}

func (e *resubscribeRestart) Error() string {
	if e.overflow {
		return "more than " + strconv.Itoa(maxUnsubscribed) + " names of " + e.typeURL + " unsubscribed: restarting the stream to forget them"
	}
	return "a " + e.typeURL + " unsubscribed on the stream (" + e.name + ") is wanted again: restarting the stream"
}

// claimRestart ends a session that would subscribe to a name the class
// still holds though the stream unsubscribed from it (a shard subscribed
// again while the unsubscription was sent, so the class kept it):
// go-control-plane forgot what it sent for the name and, were the resource
// deleted since, would never say so to a "+[name]". The new stream's first
// request claims it in initial_resource_versions instead.
type claimRestart struct {
	typeURL, name string
}

func (e *claimRestart) Error() string {
	return "a " + e.typeURL + " held across an unsubscription (" + e.name + ") is wanted again: restarting the stream"
}

// heldNotSubscribed returns a name want adds to the stream's subscription
// have that the class holds (a version is kept for it); none under a
// wildcard that keeps everything current (not a site-specific one).
func (ds *deltaSession) heldNotSubscribed(typeURL string, have, want shard.Subscription) (string, bool) {
	if !ds.siteWild && (have.Wildcard || want.Wildcard) {
		return "", false
	}
	for _, n := range want.Added(have) {
		if ds.deltaVersions[typeURL].has(n) {
			return n, true
		}
	}
	return "", false
}

// subscriptionDiff is what to subscribe and unsubscribe to go from have to
// want; "*" stands for the wildcard.
func subscriptionDiff(have, want shard.Subscription) (sub, unsub []string) {
	if want.Wildcard && !have.Wildcard {
		sub = append(sub, shard.Wildcard)
	}
	if have.Wildcard && !want.Wildcard {
		unsub = append(unsub, shard.Wildcard)
	}
	sub = append(sub, want.Added(have)...)
	unsub = append(unsub, have.Added(want)...)
	return sub, unsub
}

// forget drops the versions of resources the class dropped: claiming them
// in a later initial_resource_versions would keep the upstream from sending
// them.
func (ds *deltaSession) forget(typeURL string, dropped []string) {
	ds.deltaVersions[typeURL].remove(dropped)
}

// claims returns the initial_resource_versions of a stream's first
// request of typeURL asking for want (nil when none): the upstream version
// of each resource the class holds within want and, want naming names, the
// empty version for each name it asks that the class does not hold.
//
// The empty claims make the upstream answer every name: go-control-plane
// never answers a subscription to a name that does not exist, but reports
// the removal of one a stream claims (and sends one that exists, whatever
// the version). Without an answer the name's shard stays unknown, and a
// delta client that holds the name all the same (applied from a response
// that crossed its unsubscription, before the class dropped it) would never
// be told it was deleted (conformance
// snapshot-ads-delta-crossed-resubscribe.json). A wildcard is answered
// whatever exists, so it claims nothing more (but for a site-specific one:
// the names beside it are answered as names).
func (ds *deltaSession) claims(typeURL string, want shard.Subscription) map[string]string {
	var out map[string]string
	for name, v := range ds.deltaVersions[typeURL].all() {
		if want.Wildcard || want.Has(name) {
			if out == nil {
				out = map[string]string{}
			}
			out[name] = v
		}
	}
	if want.Wildcard && !ds.siteWild {
		return out
	}
	for _, name := range want.Names {
		if _, held := out[name]; !held {
			if out == nil {
				out = make(map[string]string, len(want.Names))
			}
			out[name] = ""
		}
	}
	return out
}

func (ds *deltaSession) send(req *discoverygrpc.DeltaDiscoveryRequest) error {
	if ds.first {
		req.Node = ds.node
		ds.first = false
	}
	if err := ds.stream.SendMsg(req); err != nil {
		return fmt.Errorf("send %s request: %w", req.GetTypeUrl(), err)
	}
	return nil
}

// handle validates one DeltaDiscoveryResponse, installs it and ACKs it, or
// NACKs it whole (nothing of it reaches clients).
func (ds *deltaSession) handle(b []byte) (bool, error) {
	resp, err := wire.ParseDeltaResponse(b)
	if err != nil {
		return false, fmt.Errorf("undecodable delta response: %w", err)
	}
	ds.setStatus(func(st *ClassStreamStatus) { st.Responses++ })
	ts := ds.types[resp.TypeURL]
	if ts == nil {
		ds.dropUnsubscribed(resp.TypeURL)
		return false, nil
	}
	ctx, end := ds.traceResponse(resp.TypeURL, resp.SystemVersionInfo, len(resp.Resources))
	// A response over the key is rejected unvalidated (msgsize.go).
	var (
		resources []*shard.Resource
		versions  []string
		beats     []shard.HeartbeatEntry
	)
	err = oversized(len(b), ds.maxMsg)
	if err == nil {
		resources, versions, beats, err = ds.validate(resp)
	}
	if err == nil {
		defer end(nil) // the span covers validation and the install below
	}
	if err != nil {
		end(err)
		var rej *RejectError
		if !errors.As(err, &rej) {
			return false, err
		}
		detail := ds.rejected(resp.TypeURL, resp.SystemVersionInfo, rej, true)
		return false, ds.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resp.TypeURL, ResponseNonce: resp.Nonce, ErrorDetail: detail})
	}
	heartbeatOnly := len(resources) == 0 && len(resp.Removed) == 0 && len(beats) > 0
	kind := shard.UpdateIncremental
	if heartbeatOnly {
		kind = shard.UpdateHeartbeats
	}
	u := shard.Update{Kind: kind, Resources: resources, Removed: resp.Removed, Heartbeats: beats, Ctx: ctx, Asked: true, Distinct: true}
	if ds.valid.passVersions {
		u.Version = resp.SystemVersionInfo // none: content hashes
	}
	ds.class.ApplyUpdate(resp.TypeURL, u)
	held := ds.deltaVersions[resp.TypeURL]
	if held == nil {
		held = &heldVersions{}
		ds.deltaVersions[resp.TypeURL] = held
	}
	set := make([]heldVersion, 0, len(resources))
	for i, r := range resources {
		// Versions only of what the stream asks for now: an answer sent
		// before an unsubscription reached the upstream is not kept by the
		// class, and a version claimed for it on a later subscription would
		// keep the upstream from ever sending it.
		if ts.sub.Covers(r.Name, r.Aliases()) {
			// Interned, not kept: r.Name shares r's bytes
			// (shard.NewResource), which an entry kept over later versions
			// would keep.
			set = append(set, heldVersion{name: r.Name, version: versions[i]})
		} else {
			ds.drops.Add(drop.UpstreamUnsubscribed) // the class does not keep it either
		}
	}
	held.set(set)
	held.remove(resp.Removed)
	ts.good = true
	ds.metrics.Response(ds.class.Name, resp.TypeURL, true)
	ds.setStatus(func(st *ClassStreamStatus) {
		st.ACKs++
		st.Versions[resp.TypeURL] = ds.cut(resp.SystemVersionInfo)
	})
	return true, ds.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: resp.TypeURL, ResponseNonce: resp.Nonce})
}

// validate checks every resource of a delta response: a well-formed
// Resource whose name matches the resource it carries, and the checks of
// validator.resources. A Resource without a resource is a TTL heartbeat.
func (ds *deltaSession) validate(resp *wire.RawDeltaResponse) ([]*shard.Resource, []string, []shard.HeartbeatEntry, error) {
	cands := make([]candidate, 0, len(resp.Resources))
	versions := make([]string, 0, len(resp.Resources))
	var beats []shard.HeartbeatEntry
	for i, raw := range resp.Resources {
		r, err := wire.ParseDeltaResource(raw)
		switch {
		case err != nil:
			return nil, nil, nil, reject("resources[%d]: malformed Resource: %v", i, err)
		case r.Name == "":
			return nil, nil, nil, reject("resources[%d]: Resource without a name", i)
		case r.Any == nil:
			beats = append(beats, shard.HeartbeatEntry{Name: r.Name, TTL: bytes.Clone(r.TTL)})
			continue
		}
		cands = append(cands, candidate{raw: r.Any, ttl: r.TTL, declared: r.Name, aliases: r.Aliases, version: r.Version})
		versions = append(versions, r.Version)
	}
	resources, err := ds.valid.resources(resp.TypeURL, cands)
	if err != nil {
		return nil, nil, nil, err
	}
	return resources, versions, beats, nil
}

func (ds *deltaSession) settled() bool {
	for _, ts := range ds.types {
		if !ts.good {
			return false
		}
	}
	return true
}
