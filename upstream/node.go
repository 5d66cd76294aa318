package upstream

import (
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
)

// relayFeatures are the client features the relay itself supports upstream,
// whatever its clients do: TTLs, and resources wrapped for them in SotW.
var relayFeatures = []string{"xds.config.supports-resource-ttl", "xds.config.supports-resource-in-sotw"}

// upstreamNode synthesizes the node the relay presents for a class: the
// identifying fields a control plane uses to pick configuration (cluster,
// locality, metadata, user agent, client features) are copied from the first
// downstream node of the class, plus the features the relay supports itself
// (relayFeatures); the id is the relay's own, since the stream speaks for
// many nodes.
func upstreamNode(first *corev3.Node, relayID string) *corev3.Node {
	features := slices.Clone(first.GetClientFeatures())
	for _, f := range relayFeatures {
		if !slices.Contains(features, f) {
			features = append(features, f)
		}
	}
	n := &corev3.Node{
		Id:                   relayID,
		Cluster:              first.GetCluster(),
		Locality:             first.GetLocality(),
		Metadata:             first.GetMetadata(),
		UserAgentName:        first.GetUserAgentName(),
		UserAgentVersionType: first.GetUserAgentVersionType(),
		ClientFeatures:       features,
	}
	return proto.Clone(n).(*corev3.Node)
}
