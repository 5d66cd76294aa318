package relay

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/shard/clientlog"
)

// Input bounds. Every value a client sends is checked here before the relay
// stores it, logs it or uses it as a metric label; a value out of bounds
// ends the stream with INVALID_ARGUMENT naming the field and the limit (its
// config key), and the status never echoes more than a prefix of it.
// Strings are valid UTF-8 by then: requests that are not fail to decode
// (decode.go).

// echo is how much of a refused value a status message repeats.
const echo = 64

// checkTypeURL refuses a type URL that is too long or not shaped like one
// (spec: type.googleapis.com/<resource type>; protobuf's Any allows any
// host and path before the last "/", after which comes the message's full
// name).
func (s *Server) checkTypeURL(typeURL string) error {
	if max := s.opts.MaxTypeURLBytes; len(typeURL) > max {
		return status.Errorf(codes.InvalidArgument, "type_url: %d bytes exceed limits.max_type_url_bytes (%d): %q", len(typeURL), max, clientlog.Truncate(typeURL, echo))
	}
	if !typeURLShape(typeURL) {
		return status.Errorf(codes.InvalidArgument, "type_url: %q is not a type URL (type.googleapis.com/<full message name>: printable ASCII, a full protobuf name after the last /)", clientlog.Truncate(typeURL, echo))
	}
	return nil
}

// typeURLShape reports whether t is printable ASCII without spaces whose
// last "/"-separated segment is a full protobuf name (dot-separated
// identifiers).
func typeURLShape(t string) bool {
	slash := -1
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c <= ' ' || c > '~' {
			return false
		}
		if c == '/' {
			slash = i
		}
	}
	if slash < 0 {
		return false
	}
	name := t[slash+1:]
	start := true // at the start of an identifier
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.' && !start:
			start = true
		case c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			start = false
		case '0' <= c && c <= '9' && !start:
		default:
			return false
		}
	}
	return !start // not empty, no trailing dot
}

// checkNameBytes refuses a resource name longer than the limit.
func (s *Server) checkNameBytes(field string, names []string) error {
	max := s.opts.MaxResourceNameBytes
	for i, n := range names {
		if len(n) > max {
			return status.Errorf(codes.InvalidArgument, "%s[%d]: %d bytes exceed limits.max_resource_name_bytes (%d): %q", field, i, len(n), max, clientlog.Truncate(n, echo))
		}
	}
	return nil
}

// checkVersionBytes refuses a version a client sends (SotW version_info,
// delta initial_resource_versions) longer than any the relay could have
// sent it: versions are kept per stream and shown on /debug/streams.
func (s *Server) checkVersionBytes(field string, versions []string) error {
	max := s.opts.MaxVersionBytes
	for _, v := range versions {
		if len(v) > max {
			return status.Errorf(codes.InvalidArgument, "%s: a version of %d bytes exceeds limits.max_version_bytes (%d): %q", field, len(v), max, clientlog.Truncate(v, echo))
		}
	}
	return nil
}

// checkNode refuses a node too large to keep: its encoding, its id, or the
// name of the class it maps to (a metric label, a log field, the key of
// the class's upstream stream). It returns the class name.
func (s *Server) checkNode(node *corev3.Node) (string, error) {
	if max, n := s.opts.MaxNodeBytes, proto.Size(node); n > max {
		return "", status.Errorf(codes.InvalidArgument, "node: %d bytes encoded exceed limits.max_node_bytes (%d)", n, max)
	}
	if max, id := s.opts.MaxNodeIDBytes, node.GetId(); len(id) > max {
		return "", status.Errorf(codes.InvalidArgument, "node.id: %d bytes exceed limits.max_node_id_bytes (%d): %q", len(id), max, clientlog.Truncate(id, echo))
	}
	class := s.registry.Classify(node)
	if max := s.opts.MaxClassNameBytes; len(class) > max {
		return "", status.Errorf(codes.InvalidArgument, "node: its class name (node.cluster or a node_classes rule's result) is %d bytes, over limits.max_class_name_bytes (%d): %q",
			len(class), max, clientlog.Truncate(class, echo))
	}
	return class, nil
}
