package xdstest

// This file applies the responses a Client receives to what it holds, by
// the spec's client rules, ACKing or NACKing each.

import (
	"fmt"
	"maps"
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
)

func nackDetail(typeURL string) *status.Status {
	return &status.Status{Code: int32(codes.InvalidArgument), Message: "xdstest: NACK on demand for " + Short(typeURL)}
}

func (c *Client) handleSotWLocked(r *discoveryv3.DiscoveryResponse) error {
	typeURL := r.GetTypeUrl()
	ts := c.typeLocked(typeURL)
	ts.received++
	ts.nonce = r.GetNonce()
	got := map[string]*anypb.Any{}
	for _, a := range r.GetResources() {
		name, err := resourceName(a)
		if err != nil {
			return err
		}
		got[name] = a
	}
	ev := Event{TypeURL: typeURL, Version: r.GetVersionInfo(), Names: slices.Sorted(maps.Keys(got)), Response: r}
	if ts.nack > 0 {
		ts.nack--
		ts.nacked++
		ev.NACKed = true
		c.logLocked(ev)
		for n, a := range got {
			ts.rejected[n] = a
		}
		if FullState(typeURL) {
			for n := range ts.held {
				if got[n] == nil {
					ts.rejected[n] = nil
				}
			}
		}
		return c.sendLocked(typeURL, &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: ts.version,
			ResourceNames: ts.last, ResponseNonce: ts.nonce, ErrorDetail: nackDetail(typeURL)})
	}
	c.logLocked(ev)
	ts.version, ts.dropped = r.GetVersionInfo(), false
	if FullState(typeURL) {
		clear(ts.held)
		clear(ts.rejected)
	}
	for n, a := range got {
		ts.held[n] = a
		delete(ts.rejected, n)
	}
	ts.dropUncovered()
	return c.sendLocked(typeURL, &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: ts.version,
		ResourceNames: ts.last, ResponseNonce: ts.nonce})
}

func (c *Client) handleDeltaLocked(r *discoveryv3.DeltaDiscoveryResponse) error {
	typeURL := r.GetTypeUrl()
	ts := c.typeLocked(typeURL)
	ts.received++
	ts.nonce = r.GetNonce()
	ev := Event{TypeURL: typeURL, Version: r.GetSystemVersionInfo(), Removed: slices.Sorted(slices.Values(r.GetRemovedResources())), Response: r}
	for _, res := range r.GetResources() {
		ev.Names = append(ev.Names, res.GetName())
	}
	slices.Sort(ev.Names)
	if ts.nack > 0 {
		ts.nack--
		ts.nacked++
		ev.NACKed = true
		c.logLocked(ev)
		for _, res := range r.GetResources() {
			if res.GetResource() != nil {
				ts.rejected[res.GetName()] = res.GetResource()
			}
		}
		for _, n := range r.GetRemovedResources() {
			ts.rejected[n] = nil
		}
		return c.sendLocked(typeURL, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: ts.nonce, ErrorDetail: nackDetail(typeURL)})
	}
	c.logLocked(ev)
	for _, res := range r.GetResources() {
		if res.GetResource() == nil { // a heartbeat: nothing changes
			continue
		}
		if !ts.covers(res.GetName()) {
			continue
		}
		ts.held[res.GetName()] = res.GetResource()
		ts.versions[res.GetName()] = res.GetVersion()
		delete(ts.rejected, res.GetName())
	}
	for _, n := range r.GetRemovedResources() {
		delete(ts.held, n)
		delete(ts.versions, n)
		delete(ts.rejected, n)
	}
	return c.sendLocked(typeURL, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: ts.nonce})
}

// resourceName returns the name of a resource by decoding it.
func resourceName(a *anypb.Any) (string, error) {
	msg, err := a.UnmarshalNew()
	if err != nil {
		return "", fmt.Errorf("xdstest: decode %s: %w", a.GetTypeUrl(), err)
	}
	if n, ok := msg.(interface{ GetName() string }); ok {
		return n.GetName(), nil
	}
	if n, ok := msg.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName(), nil
	}
	return "", fmt.Errorf("xdstest: %s resource without a name", a.GetTypeUrl())
}

func (ts *typeState) covers(name string) bool { return ts.wildcard || ts.names[name] }

// dropUncovered forgets held resources the subscription no longer covers,
// as a client does when it unsubscribes.
func (ts *typeState) dropUncovered() {
	for n := range ts.held {
		if !ts.covers(n) {
			delete(ts.held, n)
			delete(ts.versions, n)
			ts.dropped = true
		}
	}
}
