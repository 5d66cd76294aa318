package relay

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
)

// subscribe subscribes w to (typeURL, sub) in class. A subscription that
// would push the class past its limits (shard.Limits: what its upstream
// stream may ask for) is refused with RESOURCE_EXHAUSTED naming the limit;
// the class, its upstream and its other clients are left as they were.
func subscribe(class *shard.Class, typeURL string, sub shard.Subscription, w shard.Watcher) (*shard.Shard, error) {
	sh, err := class.TrySubscribe(typeURL, sub, w)
	if le := (*shard.LimitError)(nil); errors.As(err, &le) {
		return nil, status.Error(codes.ResourceExhausted, le.Error())
	}
	return sh, err
}

// deltaNamesLimitLocked refuses a delta request after which the stream
// would be subscribed to more than limits.max_resource_names names over all
// its types: the names of one request are bounded, but a delta stream's
// subscription is the sum of its requests. initial is the request's count
// of initial_resource_versions, bounded the same way (mu held).
//
// The names the stream remembers the client may hold although it
// unsubscribed them (deltaTypeSub.maybe) are bounded by the same limit on
// their own, without ending a client that keeps within its subscription:
// past it, the stream forgets the excess (trimMaybeLocked).
func (s *deltaStream) deltaNamesLimitLocked(initial int) error {
	max := s.srv.opts.MaxResourceNames
	if initial > max {
		return status.Errorf(codes.ResourceExhausted, "initial_resource_versions: %d entries exceed the limit of %d (limits.max_resource_names)", initial, max)
	}
	names := 0
	for _, d := range s.types.all() {
		names += len(d.names)
	}
	if names > max {
		return status.Errorf(codes.ResourceExhausted, "resource_names_subscribe: the stream would subscribe to %d names, over the limit of %d (limits.max_resource_names)", names, max)
	}
	s.trimMaybeLocked(max)
	return nil
}

// sotwNamesLimitLocked refuses a SotW request after which the stream would
// be subscribed to more than limits.max_resource_names names over all its
// types, as a delta stream is: one request's names are bounded by
// checkNames, but a stream of many types holds the names of each. sub
// replaces t's subscription; the other types count as they are (mu held).
func (s *sotwStream) sotwNamesLimitLocked(t *sotwTypeSub, sub shard.Subscription) error {
	max := s.srv.opts.MaxResourceNames
	names := len(sub.Names)
	for _, o := range s.types.all() {
		if o != t && o.shard != nil {
			names += len(o.shard.Sub.Names)
		}
	}
	if names > max {
		return status.Errorf(codes.ResourceExhausted, "resource_names: the stream would subscribe to %d names over its types, over the limit of %d (limits.max_resource_names)", names, max)
	}
	return nil
}

// trimMaybeLocked forgets names of the stream's maybe-held sets past max in
// all. Only a client that unsubscribed more than max names while responses
// were on their way loses anything: a name forgotten is not owed to a
// wildcard it subscribes later, so it may keep a resource deleted since
// (mu held).
func (s *deltaStream) trimMaybeLocked(max int) {
	total := 0
	for _, d := range s.types.all() {
		total += len(d.maybe)
	}
	for _, d := range s.types.all() {
		for n := range d.maybe {
			if total <= max {
				return
			}
			delete(d.maybe, n)
			total--
		}
	}
}
