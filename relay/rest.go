package relay

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// MaxRESTBody bounds the DiscoveryRequest body of a REST poll.
const MaxRESTBody = 1 << 20

// restPaths maps the REST-JSON endpoints (xds-api-endpoints "REST
// endpoints") to the type URL each serves: the registered types' RESTPath.
var restPaths = func() map[string]string {
	m := map[string]string{}
	for _, t := range xdstype.All() {
		if t.RESTPath != "" {
			m[t.RESTPath] = t.URL
		}
	}
	return m
}()

// RESTHandler serves REST-JSON polling (spec "REST-JSON polling
// subscriptions"): POST /v3/discovery:{clusters,endpoints,listeners,routes,
// secrets,runtime,scoped-routes} with a DiscoveryRequest in the proto3 JSON
// mapping.
//
// The request subscribes its node's class to the names asked for (none: the
// wildcard) for as long as it is served. When the shard's version differs
// from the request's version_info the answer is 200 with the
// DiscoveryResponse as JSON (without a nonce, which REST does not need).
// Otherwise, and while the shard has nothing to send yet, the request is held
// (a long poll) until the version changes, the client goes away or maxHold
// passes, which answers 304 Not Modified with an empty body. maxHold 0
// answers at once.
func (s *Server) RESTHandler(maxHold time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serveREST(w, r, maxHold)
	})
}

func (s *Server) serveREST(w http.ResponseWriter, r *http.Request, maxHold time.Duration) {
	typeURL, ok := restPaths[r.URL.Path]
	if !ok {
		if rest, v2 := strings.CutPrefix(r.URL.Path, "/v2/discovery:"); v2 {
			msg := fmt.Sprintf("%s: xDS transport API v2 is not supported; configure the client for transport_api_version V3", r.URL.Path)
			if _, known := restPaths["/v3/discovery:"+rest]; known {
				msg += " (POST /v3/discovery:" + rest + ")"
			}
			http.Error(w, msg, http.StatusNotFound)
			return
		}
		http.Error(w, fmt.Sprintf("%s: not an xDS REST endpoint", r.URL.Path), http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, fmt.Sprintf("method %s not allowed: xDS REST polling is POST", r.Method), http.StatusMethodNotAllowed)
		return
	}

	if s.Draining() {
		s.refuseDrainingPoll(w)
		return
	}
	lift := bodyDeadline(w, s.opts.RESTReadTimeout)
	req, status, err := s.readRESTRequest(w, r, typeURL)
	if err != nil {
		if status == http.StatusRequestTimeout {
			w.Header().Set("Connection", "close")
		}
		http.Error(w, err.Error(), status)
		return
	}
	lift()
	// The same checks as a gRPC stream's, before anything is created.
	if code, err := s.restAuthorize(r, typeURL, req.GetNode()); err != nil {
		http.Error(w, grpcMessage(err), code)
		return
	}
	names := req.GetResourceNames()
	// REST has no stream to remember an explicit subscription on: every
	// request is a first one, so no names is the legacy wildcard.
	sub := shard.NewSubscription(names, len(names) == 0)
	if err := s.refusePoll(s.registry.Classify(req.GetNode()), typeURL, sub); err != nil {
		http.Error(w, grpcMessage(err), http.StatusTooManyRequests)
		return
	}
	if err := s.newClass(restPeerContext(r), req.GetNode()); err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	class, err := s.registry.Acquire(req.GetNode())
	if err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	wrapped := slices.Contains(req.GetNode().GetClientFeatures(), FeatureResourceInSotW)

	// The lease is released before the poll's shard is left (it lingers,
	// as an ended stream's: shard.Class.Leave), so a class used only by
	// polls lingers with its shards between them.
	resp, err := restPoll(r, class, typeURL, sub, req.GetVersionInfo(), maxHold, &s.held, s.drain.started, func() { s.registry.Release(class) })
	if errors.Is(err, errPollDrained) {
		s.refuseDrainingPoll(w)
		return
	}
	if err != nil {
		if errors.As(err, new(heldPollsFull)) {
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, err.Error(), http.StatusTooManyRequests) // a class limit (shard.LimitError) or rest.max_held_polls
		return
	}
	if resp == nil {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	body := resp.Body()
	if wrapped {
		body = resp.WrappedBody() // the TTLs; Body when there are none
	}
	js, err := restJSON(body.Bytes())
	if err != nil {
		if ok, dropped := s.clog.Allow(); ok { // shared with NACKs: one flood budget for client-caused log lines
			s.log.Warn("REST response not encodable as JSON", zap.String("type_url", typeURL), zap.Error(err), dropped)
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(js)
}

// readRESTRequest decodes and checks the request body; on failure it returns
// the HTTP status to answer with and an error naming the problem.
func (s *Server) readRESTRequest(w http.ResponseWriter, r *http.Request, typeURL string) (*discoveryv3.DiscoveryRequest, int, error) {
	data, code, err := s.restBody(w, r)
	if err != nil {
		return nil, code, err
	}
	req := &discoveryv3.DiscoveryRequest{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(data, req); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("malformed DiscoveryRequest JSON: %s", protoMessage(err))
	}
	if t := req.GetTypeUrl(); t != "" && t != typeURL {
		return nil, http.StatusBadRequest, fmt.Errorf("type_url: %q on %s, which serves %q", clientlog.Truncate(t, echo), r.URL.Path, typeURL)
	}
	if req.GetNode() == nil {
		return nil, http.StatusBadRequest, errors.New("node: required; it selects the node class the resources come from")
	}
	if _, err := s.checkNode(req.GetNode()); err != nil {
		return nil, http.StatusBadRequest, errors.New(status.Convert(err).Message())
	}
	if err := s.checkNameBytes("resource_names", req.GetResourceNames()); err != nil {
		return nil, http.StatusBadRequest, errors.New(status.Convert(err).Message())
	}
	for i, n := range req.GetResourceNames() {
		if n == "" {
			return nil, http.StatusBadRequest, fmt.Errorf("resource_names[%d]: empty resource name", i)
		}
	}
	if max := s.opts.MaxResourceNames; len(req.GetResourceNames()) > max {
		return nil, http.StatusBadRequest, fmt.Errorf("resource_names: %d names exceed the limit of %d", len(req.GetResourceNames()), max)
	}
	return req, 0, nil
}

// grpcMessage is a gRPC status error's message, without the "rpc error:
// code = ..." wrapping.
func grpcMessage(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// protoMessage is err's text without protojson's "proto:" prefix (which the
// library spells with a space or, at random, a no-break space).
func protoMessage(err error) string {
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "proto:"); ok {
		return strings.TrimLeft(rest, " \u00a0")
	}
	return msg
}

// restPoll subscribes to (typeURL, sub) for the duration of one request and
// returns the response to send: the shard's current one once its version
// differs from clientVersion, or nil when none does within maxHold (or before
// the request ends). It calls release, then leaves the subscription, before
// it returns. A subscription the class's limits refuse is the error, and so
// is a poll to be held while held has no room (heldPollsFull).
//
// The shard is left as an ended stream leaves it (Leave, not Unsubscribe):
// it lingers for the class's linger with its upstream interest, so a client
// polling every few seconds is answered from the cache and its names are
// not unsubscribed upstream and subscribed again at each poll.
//
// A poll held when the relay begins to drain (drained closed) returns
// errPollDrained at once.
func restPoll(r *http.Request, class *shard.Class, typeURL string, sub shard.Subscription, clientVersion string, maxHold time.Duration, held *heldPolls, drained <-chan struct{}, release func()) (*shard.Response, error) {
	rw := &restWatcher{sig: dedup.NewSignal()}
	sh, err := class.TrySubscribe(typeURL, sub, rw)
	if err != nil {
		release()
		return nil, err
	}
	defer func() {
		release()
		class.Leave(sh, rw)
	}()

	// Every change after Subscribe signals rw, so checking after each signal
	// misses none.
	if resp := restSendable(sh, clientVersion); resp != nil || maxHold <= 0 {
		return resp, nil
	}
	if !held.take() {
		return nil, heldPollsFull{held.max}
	}
	defer held.done()
	hold := time.NewTimer(maxHold)
	defer hold.Stop()
	for {
		select {
		case <-rw.sig.C():
			if resp := restSendable(sh, clientVersion); resp != nil {
				return resp, nil
			}
		case <-hold.C:
			return nil, nil
		case <-drained:
			return nil, errPollDrained
		case <-r.Context().Done():
			// The client is gone (or the server is closing): nothing changed
			// as far as it is concerned.
			return nil, nil
		}
	}
}

// errPollDrained ends a poll held when the relay began to drain.
var errPollDrained = errors.New("xds-relay is draining")

// restSendable returns the shard's current response if the client lacks it:
// it exists, differs from clientVersion and (for types without full-state
// semantics, like SotW) is not empty.
func restSendable(sh *shard.Shard, clientVersion string) *shard.Response {
	cur := sh.Current()
	if cur == nil || cur.Version == clientVersion {
		return nil
	}
	if len(cur.Names) == 0 && !xdstype.FullState(sh.TypeURL) {
		return nil
	}
	return cur
}

// restJSON renders a nonce-less SotW DiscoveryResponse body in the proto3
// JSON mapping. protojson must resolve every Any, as resource or nested
// typed_config: package xdstype links in the types it can; a response
// holding another one answers 500.
func restJSON(body []byte) ([]byte, error) {
	resp := &discoveryv3.DiscoveryResponse{}
	if err := proto.Unmarshal(body, resp); err != nil {
		return nil, fmt.Errorf("decoding the response: %v", err)
	}
	for _, a := range resp.GetResources() {
		if _, err := protoregistry.GlobalTypes.FindMessageByURL(a.GetTypeUrl()); err != nil {
			return nil, fmt.Errorf("resource type %q has no JSON encoding in the relay: %v", a.GetTypeUrl(), err)
		}
	}
	js, err := protojson.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("encoding the %s response as JSON: %v", resp.GetTypeUrl(), err)
	}
	return js, nil
}

// restWatcher wakes one REST request when its shard changes (or gets a TTL
// heartbeat, after which the request just checks again). Its signal is
// safe for concurrent use: the class notifies, the request's goroutine
// (restPoll, its owner) waits.
type restWatcher struct{ sig dedup.Signal }

var _ shard.Watcher = (*restWatcher)(nil)

// ShardChanged implements shard.Watcher.
func (w *restWatcher) ShardChanged(*shard.Shard, *shard.Response) { w.sig.Notify() }

// ShardHeartbeat implements shard.Watcher.
func (w *restWatcher) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) { w.sig.Notify() }
