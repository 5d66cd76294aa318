package upstream

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
)

// upstreamNode synthesizes the node the relay presents for a class: the
// identifying fields a control plane uses to pick configuration (cluster,
// locality, metadata, user agent, client features) are copied from the first
// downstream node of the class; the id is the relay's own, since the stream
// speaks for many nodes.
func upstreamNode(first *corev3.Node, relayID string) *corev3.Node {
	n := &corev3.Node{
		Id:                   relayID,
		Cluster:              first.GetCluster(),
		Locality:             first.GetLocality(),
		Metadata:             first.GetMetadata(),
		UserAgentName:        first.GetUserAgentName(),
		UserAgentVersionType: first.GetUserAgentVersionType(),
		ClientFeatures:       first.GetClientFeatures(),
	}
	return proto.Clone(n).(*corev3.Node)
}
