package relay

import (
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/shard"
)

// anyClient is what a test that holds for both protocols does with a raw
// client: *client (SotW) and *deltaClient.
type anyClient interface {
	subscribe(typeURL string, names ...string)
	// wantNext requires the next response to be of typeURL and to carry
	// exactly rs (delta: and to remove nothing).
	wantNext(typeURL string, rs ...*shard.Resource)
	// wantNextACK is wantNext, then ACKs the response.
	wantNextACK(typeURL string, rs ...*shard.Resource)
	// fence is a request barrier: see (*client).fence.
	fence()
	close()
	closeSend() error
	expectNothing(d time.Duration)
}

var (
	_ anyClient = (*client)(nil)
	_ anyClient = (*deltaClient)(nil)
)

func (c *client) wantNext(typeURL string, rs ...*shard.Resource) {
	c.t.Helper()
	wantResources(c.t, c.nextOf(typeURL), rs...)
}

func (c *deltaClient) wantNext(typeURL string, rs ...*shard.Resource) {
	c.t.Helper()
	wantDelta(c.t, c.nextOf(typeURL), nil, rs...)
}

func (c *client) wantNextACK(typeURL string, rs ...*shard.Resource) {
	c.t.Helper()
	c.ackNext(typeURL, rs...)
}

func (c *deltaClient) wantNextACK(typeURL string, rs ...*shard.Resource) {
	c.t.Helper()
	c.ackNext(typeURL, nil, rs...)
}

// closeSend half-closes the stream, as a client that is done does.
func (r *rawStream[Req, Resp]) closeSend() error { return r.s.CloseSend() }

// protocols are the ADS clients of the two protocols, for the tests that
// hold for both.
var protocols = []struct {
	name string
	ads  func(*harness, *testing.T) anyClient
}{
	{"sotw", func(h *harness, t *testing.T) anyClient { return h.ads(t) }},
	{"delta", func(h *harness, t *testing.T) anyClient { return h.deltaADS(t) }},
}

// ackNext requires the next response to be of typeURL and to carry exactly
// rs, ACKs it and returns it.
func (c *client) ackNext(typeURL string, rs ...*shard.Resource) *response {
	c.t.Helper()
	r := c.nextOf(typeURL)
	wantResources(c.t, r, rs...)
	c.ack(r)
	return r
}

// ackNext requires the next response to be of typeURL, to carry exactly rs
// and to remove exactly removed, ACKs it and returns it.
func (c *deltaClient) ackNext(typeURL string, removed []string, rs ...*shard.Resource) *deltaResponse {
	c.t.Helper()
	r := c.nextOf(typeURL)
	wantDelta(c.t, r, removed, rs...)
	c.ack(r)
	return r
}
