package xdstest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// ErrNothingFirst: a SotW client cannot subscribe to nothing before it
// sent a name for the type (an empty list would be the legacy wildcard).
var ErrNothingFirst = errors.New("xdstest: SotW cannot subscribe to nothing before any name was sent")

// Options say how a Client talks.
type Options struct {
	Node  *corev3.Node // sent on the first request of every stream
	Delta bool         // incremental xDS instead of state of the world
	ADS   bool         // one aggregated stream; false: one stream per type on its own service
	// Creds secure the connection; nil is plaintext.
	Creds credentials.TransportCredentials
}

// Sub is a subscription for one type.
type Sub struct {
	Wildcard bool     // subscribe to every resource of the type
	Legacy   bool     // with Wildcard: say it as the legacy empty request when the stream allows it
	Names    []string // explicit names (besides the wildcard)
}

// String renders a subscription as in the spec's examples: legacy[] for
// the legacy wildcard alone, [*], [a b], [* a] (a legacy wildcard with
// names included).
func (s Sub) String() string {
	if s.Wildcard && s.Legacy && len(s.Names) == 0 {
		return "legacy[]"
	}
	names := slices.Clone(s.Names)
	if s.Wildcard {
		names = append([]string{"*"}, names...)
	}
	return fmt.Sprint(names)
}

// Event is one response the client received, as it handled it.
type Event struct {
	TypeURL string
	Version string   // SotW version_info or delta system_version_info
	Names   []string // resources carried
	Removed []string // delta removed_resources
	NACKed  bool
	// Response is the response as received: a *discoveryv3.DiscoveryResponse
	// or *discoveryv3.DeltaDiscoveryResponse. Read-only.
	Response proto.Message
}

// Client is a raw xDS client of one protocol and service. Its methods are
// safe for concurrent use. A response is handled in the receive goroutine:
// NACKed if a NACK is pending for its type, else applied and ACKed.
type Client struct {
	// Set at construction, read-only.
	opts Options
	conn *grpc.ClientConn

	// Guarded by mu. Requests are sent under mu, so the wire order of ACKs
	// and subscription changes is the order of the client's decisions.
	mu      sync.Mutex
	sess    *session
	types   map[string]*typeState
	changed chan struct{} // closed and replaced on every change of state
	log     []Event       // bounded: the last maxLog events
	cursor  int           // Next's position in log
	closed  bool
}

const maxLog = 1024

// typeState is what the client asked for and holds for one type URL.
type typeState struct {
	// The subscription as the server must read it (spec rules).
	wildcard bool
	legacy   bool // wildcard expressed as the legacy empty request
	names    map[string]bool
	sent     bool     // a request for the type went out on this session
	sentName bool     // SotW: a non-empty resource_names went out on this session
	last     []string // SotW: resource_names of the last request

	held     map[string]*anypb.Any // what the client holds
	versions map[string]string     // delta: resource versions held
	version  string                // SotW: last accepted version_info
	dropped  bool                  // SotW: dropped some since: version no longer says what it holds
	nonce    string                // last response nonce
	nack     int                   // NACK the next nack responses
	rejected map[string]*anypb.Any // name -> what the last NACKed response said of it (nil: absent)
	received int
	nacked   int
}

// session is one incarnation of the client's streams.
type session struct {
	ctx     context.Context
	cancel  context.CancelFunc
	streams map[string]*clientStream // "" (ADS) or type URL -> stream
	wg      sync.WaitGroup
	err     error // first stream error; guarded by Client.mu
}

type clientStream struct {
	w        wireStream
	nodeSent bool // guarded by Client.mu
}

// Dial connects to addr. Streams open on the first request that needs them.
func Dial(addr string, opts Options) (*Client, error) {
	if opts.Node == nil {
		return nil, errors.New("xdstest: Options.Node is required")
	}
	creds := opts.Creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	c := &Client{opts: opts, conn: conn, types: map[string]*typeState{}, changed: make(chan struct{})}
	c.sess = c.newSession()
	return c, nil
}

func (c *Client) newSession() *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{ctx: ctx, cancel: cancel, streams: map[string]*clientStream{}}
}

// Options returns the client's options.
func (c *Client) Options() Options { return c.opts }

func (c *Client) typeLocked(typeURL string) *typeState {
	ts := c.types[typeURL]
	if ts == nil {
		ts = &typeState{names: map[string]bool{}, held: map[string]*anypb.Any{}, versions: map[string]string{}, rejected: map[string]*anypb.Any{}}
		c.types[typeURL] = ts
	}
	return ts
}

func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// streamLocked returns the open stream carrying typeURL, opening it.
func (c *Client) streamLocked(typeURL string) (*clientStream, error) {
	key := typeURL
	if c.opts.ADS {
		key = ""
	}
	if s := c.sess.streams[key]; s != nil {
		return s, nil
	}
	if c.closed {
		return nil, errors.New("xdstest: client closed")
	}
	w, err := openWire(c.sess.ctx, c.conn, c.opts.Delta, key)
	if err != nil {
		return nil, err
	}
	s := &clientStream{w: w}
	c.sess.streams[key] = s
	sess := c.sess
	sess.wg.Add(1)
	go c.receive(sess, s)
	return s, nil
}

func (c *Client) sendLocked(typeURL string, req any) error {
	s, err := c.streamLocked(typeURL)
	if err != nil {
		return err
	}
	if !s.nodeSent {
		s.nodeSent = true
		switch r := req.(type) {
		case *discoveryv3.DiscoveryRequest:
			r.Node = c.opts.Node
		case *discoveryv3.DeltaDiscoveryRequest:
			r.Node = c.opts.Node
		}
	}
	if err := s.w.send(req); err != nil {
		return fmt.Errorf("xdstest: send %s: %w", Short(typeURL), err)
	}
	return nil
}

// receive handles the stream's responses until it ends.
func (c *Client) receive(sess *session, s *clientStream) {
	defer sess.wg.Done()
	for {
		resp, err := s.w.recv()
		c.mu.Lock()
		if sess != c.sess { // a response of a session Reconnect ended: dropped unread
			c.mu.Unlock()
			return
		}
		if err != nil {
			if sess.err == nil && sess.ctx.Err() == nil {
				sess.err = err
				c.notifyLocked()
			}
			c.mu.Unlock()
			return
		}
		var herr error
		switch r := resp.(type) {
		case *discoveryv3.DiscoveryResponse:
			herr = c.handleSotWLocked(r)
		case *discoveryv3.DeltaDiscoveryResponse:
			herr = c.handleDeltaLocked(r)
		}
		if herr != nil && sess.err == nil && sess.ctx.Err() == nil {
			sess.err = herr
		}
		c.notifyLocked()
		c.mu.Unlock()
	}
}

func (c *Client) logLocked(e Event) {
	if len(c.log) == maxLog {
		c.log = c.log[1:]
		c.cursor = max(0, c.cursor-1)
	}
	c.log = append(c.log, e)
}

// Next returns the next response handled that Next has not returned yet
// (in order; up to 1024 are kept), waiting for one until ctx ends or a
// stream of the current session ends.
func (c *Client) Next(ctx context.Context) (Event, error) {
	for {
		c.mu.Lock()
		if c.cursor < len(c.log) {
			e := c.log[c.cursor]
			c.cursor++
			c.mu.Unlock()
			return e, nil
		}
		ch, err := c.changed, c.sess.err
		c.mu.Unlock()
		if err != nil {
			return Event{}, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Open opens the stream carrying typeURL (with ADS, the one stream) without
// sending anything on it, as a client that never sends its first request.
func (c *Client) Open(typeURL string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.streamLocked(typeURL)
	return err
}

// SendSotW sends a SotW request for typeURL with exactly these
// resource_names (nil or empty: the legacy wildcard on a type that never had
// names on this stream, else "nothing"), the last accepted version and the
// last nonce. The client reads its subscription by the spec's rules.
func (c *Client) SendSotW(typeURL string, names []string) error {
	if c.opts.Delta {
		return errors.New("xdstest: SendSotW on a delta client")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.typeLocked(typeURL)
	ts.last = slices.Clone(names)
	ts.names = map[string]bool{}
	ts.wildcard, ts.legacy = false, false
	if len(names) == 0 {
		if !ts.sentName {
			ts.wildcard, ts.legacy = true, true
		}
	} else {
		ts.sentName = true
		for _, n := range names {
			if n == "*" {
				ts.wildcard = true
			} else {
				ts.names[n] = true
			}
		}
	}
	ts.sent = true
	ts.dropUncovered()
	c.notifyLocked()
	claim := ts.version
	if ts.dropped && ts.nonce == "" {
		// Nothing answered on this stream yet (Reconnect skipped a type
		// subscribed to nothing): as Reconnect, claim nothing of a state
		// dropped in part since.
		claim = ""
	}
	return c.sendLocked(typeURL, &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: claim,
		ResourceNames: ts.last, ResponseNonce: ts.nonce})
}

// SendSotWResume is SendSotW as the first request of a client that
// accepted version on an earlier stream: it sends version as version_info.
func (c *Client) SendSotWResume(typeURL string, names []string, version string) error {
	c.mu.Lock()
	c.typeLocked(typeURL).version = version
	c.mu.Unlock()
	return c.SendSotW(typeURL, names)
}

// SendDelta sends a delta request for typeURL subscribing and unsubscribing
// exactly these names ("*" is the wildcard); the first request of a type on
// a stream with nothing to subscribe is the legacy wildcard.
func (c *Client) SendDelta(typeURL string, subscribe, unsubscribe []string) error {
	if !c.opts.Delta {
		return errors.New("xdstest: SendDelta on a SotW client")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sendDeltaLocked(typeURL, subscribe, unsubscribe, nil)
}

// SendDeltaResume sends a delta request for typeURL subscribing these names
// with initial_resource_versions, as the first request of a client that
// held those versions on an earlier stream. The client does not hold them:
// what it holds comes from the responses.
func (c *Client) SendDeltaResume(typeURL string, subscribe []string, versions map[string]string) error {
	if !c.opts.Delta {
		return errors.New("xdstest: SendDeltaResume on a SotW client")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sendDeltaLocked(typeURL, subscribe, nil, versions)
}

func (c *Client) sendDeltaLocked(typeURL string, subscribe, unsubscribe []string, initial map[string]string) error {
	ts := c.typeLocked(typeURL)
	if !ts.sent && len(subscribe) == 0 {
		ts.wildcard, ts.legacy = true, true
	}
	for _, n := range subscribe {
		if n == "*" {
			ts.wildcard, ts.legacy = true, false
		} else {
			ts.names[n] = true
		}
	}
	for _, n := range unsubscribe {
		if n == "*" {
			ts.wildcard, ts.legacy = false, false
		} else {
			delete(ts.names, n)
		}
	}
	ts.sent = true
	ts.dropUncovered()
	c.notifyLocked()
	return c.sendLocked(typeURL, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL,
		ResourceNamesSubscribe: subscribe, ResourceNamesUnsubscribe: unsubscribe, InitialResourceVersions: initial})
}

// Subscribe changes the subscription for typeURL to s with the requests of
// the client's protocol: SotW sends the whole list; delta sends the
// difference from the current subscription. A legacy wildcard the stream
// cannot say any more (names were sent before) is said as "*".
func (c *Client) Subscribe(typeURL string, s Sub) error {
	if !c.opts.Delta {
		c.mu.Lock()
		canLegacy := !c.typeLocked(typeURL).sentName
		c.mu.Unlock()
		var names []string
		if s.Wildcard && !(s.Legacy && canLegacy && len(s.Names) == 0) {
			names = append(names, "*")
		}
		names = append(names, s.Names...)
		if len(names) == 0 && canLegacy && !s.Wildcard {
			return ErrNothingFirst
		}
		return c.SendSotW(typeURL, names)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.typeLocked(typeURL)
	var sub, unsub []string
	want := map[string]bool{}
	for _, n := range s.Names {
		want[n] = true
		if !ts.names[n] {
			sub = append(sub, n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(ts.names)) {
		if !want[n] {
			unsub = append(unsub, n)
		}
	}
	switch {
	case s.Wildcard && !ts.wildcard && s.Legacy && !ts.sent:
		if err := c.sendDeltaLocked(typeURL, nil, nil, nil); err != nil {
			return err
		}
		if len(sub) == 0 {
			return nil
		}
	case s.Wildcard && !ts.wildcard:
		sub = append([]string{"*"}, sub...)
	case !s.Wildcard && ts.wildcard:
		unsub = append([]string{"*"}, unsub...)
	}
	if len(sub) == 0 && len(unsub) == 0 {
		return nil
	}
	return c.sendDeltaLocked(typeURL, sub, unsub, nil)
}

// NACK makes the client NACK the next n responses of typeURL.
func (c *Client) NACK(typeURL string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.typeLocked(typeURL).nack += n
}

// Reconnect ends the client's streams and opens new ones on the same
// connection, re-sending each type's subscription with what the client
// holds (SotW: the last accepted version_info; delta:
// initial_resource_versions). What it holds is kept, as a client does.
func (c *Client) Reconnect() error {
	c.mu.Lock()
	old := c.sess
	c.sess = c.newSession()
	c.mu.Unlock()
	old.cancel()
	old.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, typeURL := range slices.Sorted(maps.Keys(c.types)) {
		ts := c.types[typeURL]
		wasSent := ts.sent
		ts.sent, ts.sentName, ts.nonce = false, false, ""
		if !wasSent || (!ts.wildcard && len(ts.names) == 0) {
			continue // nothing to ask for: a new stream says nothing of the type
		}
		names := slices.Sorted(maps.Keys(ts.names))
		if !c.opts.Delta {
			var req []string
			if ts.wildcard && !(ts.legacy && len(names) == 0) {
				req = append(req, "*")
			}
			req = append(req, names...)
			ts.last = req
			ts.sent, ts.sentName = true, len(req) > 0
			claim := ts.version // what it holds, unless it dropped part of it since: then nothing
			if ts.dropped {
				claim = ""
			}
			if err := c.sendLocked(typeURL, &discoveryv3.DiscoveryRequest{TypeUrl: typeURL, VersionInfo: claim, ResourceNames: req}); err != nil {
				return err
			}
			continue
		}
		var sub []string
		if ts.wildcard && !(ts.legacy && len(names) == 0) {
			sub = append(sub, "*")
		}
		sub = append(sub, names...)
		initial := maps.Clone(ts.versions)
		ts.sent = true
		if err := c.sendLocked(typeURL, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: typeURL,
			ResourceNamesSubscribe: sub, InitialResourceVersions: initial}); err != nil {
			return err
		}
	}
	c.notifyLocked()
	return nil
}

// Close ends the client's streams and connection and waits for its
// goroutines.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	sess := c.sess
	c.mu.Unlock()
	sess.cancel()
	sess.wg.Wait()
	_ = c.conn.Close()
}
