package relay

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard"
)

// Admission is the relay's memory gate (*overload.Monitor): Refuse returns
// why the relay takes on nothing more now, or nil. While it refuses, a new
// stream, a subscription that would make a class hold a shard it does not
// hold yet (new names, a new type, the wildcard), and a REST poll that
// would create a class or a shard are refused with RESOURCE_EXHAUSTED (REST:
// 429); what streams already hold keeps its updates, and a subscription
// that only drops names, or joins a shard the class holds, is served.
type Admission interface {
	Refuse() error
}

// refuseNew is the status refusing what (a new stream, a subscription),
// or nil while the gate admits.
func (s *Server) refuseNew(what string) error {
	if s.opts.Admission == nil {
		return nil
	}
	if err := s.opts.Admission.Refuse(); err != nil {
		return status.Errorf(codes.ResourceExhausted, "%s refused: %v", what, err)
	}
	return nil
}

// refuseGrowth refuses, while the gate refuses, a switch of a stream's
// typeURL from old (nil: none) to sub that makes class hold more: sub
// names what old did not (or adds the wildcard) and no shard of the class
// is for sub yet.
func (s *Server) refuseGrowth(class *shard.Class, typeURL string, old *shard.Shard, sub shard.Subscription) error {
	if s.opts.Admission == nil {
		return nil
	}
	if old != nil && (!sub.Wildcard || old.Sub.Wildcard) && len(sub.Added(old.Sub)) == 0 {
		return nil // only fewer names
	}
	if class.HasShard(typeURL, sub) {
		return nil // joins what the class holds
	}
	return s.refuseNew("subscription")
}

// refusePoll refuses, while the gate refuses, a REST poll whose class or
// shard the relay does not hold yet: polls of what is held keep being
// answered (an idle class's shards linger between polls).
func (s *Server) refusePoll(className, typeURL string, sub shard.Subscription) error {
	if s.opts.Admission == nil {
		return nil
	}
	if c := s.registry.Lookup(className); c != nil && c.HasShard(typeURL, sub) {
		return nil
	}
	return s.refuseNew("REST poll")
}
