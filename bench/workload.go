package bench

import (
	"fmt"
	"math"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// ChurnAssignment is the one load assignment every churn client subscribes
// to (each class has its own content under this name).
const ChurnAssignment = "churn.bench.svc.cluster.local"

// Workload says what each class's CDS state is: Clusters clusters, the
// first Shared() of them byte-identical in every class, the rest unique to
// their class (same names, another EDS service name).
type Workload struct {
	Classes, Clusters int
	// Overlap is the fraction of each class's clusters that are identical
	// across classes, 0 to 1.
	Overlap float64
	// Padding adds this many bytes of filter metadata to every cluster, to
	// model larger resources than the bench's plain EDS clusters (about
	// 125 bytes encoded): a mesh's clusters carry TLS contexts, circuit
	// breakers and metadata, 0.5 to a few KB each.
	Padding int
}

// Shared is the number of each class's clusters identical across classes.
func (w Workload) Shared() int { return int(math.Round(w.Overlap * float64(w.Clusters))) }

// Cluster is class k's cluster i; changed gives it another connect timeout
// (in every class alike).
func (w Workload) Cluster(k, i int, changed bool) *clusterv3.Cluster {
	c := syntheticCluster(i, changed)
	if i >= w.Shared() {
		c.EdsClusterConfig.ServiceName = fmt.Sprintf("service-%05d.k%04d.bench.svc.cluster.local", i, k)
	}
	if w.Padding > 0 {
		c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"bench.padding": {Fields: map[string]*structpb.Value{"pad": structpb.NewStringValue(strings.Repeat("p", w.Padding))}},
		}}
	}
	return c
}

// uniform says whether every class has the same state.
func (w Workload) uniform() bool { return w.Classes == 1 || w.Shared() == w.Clusters }

// StateBytes returns the encoded bytes (google.protobuf.Any) of one class's
// resources, summed over the classes, and of the distinct resources among
// them: what a relay holding each distinct resource once would hold.
func (w Workload) StateBytes() (all, unique int64, err error) {
	size := func(k, i int) (int64, error) {
		b, err := marshalAny(w.Cluster(k, i, false))
		return int64(len(b)), err
	}
	for i := range w.Clusters {
		if i < w.Shared() {
			n, err := size(0, i)
			if err != nil {
				return 0, 0, err
			}
			all += n * int64(w.Classes)
			unique += n
			continue
		}
		for k := range w.Classes {
			n, err := size(k, i)
			if err != nil {
				return 0, 0, err
			}
			all += n
			unique += n
		}
	}
	return all, unique, nil
}

// Assignment is class k's churned load assignment at update seq: ten
// endpoints, the first of which encodes seq, so that every update's bytes
// (and their hash) are unique across classes and updates.
func Assignment(seq int) *endpointv3.ClusterLoadAssignment {
	eps := make([]*endpointv3.LbEndpoint, 10)
	for j := range eps {
		addr := fmt.Sprintf("10.0.0.%d", j+1)
		if j == 0 {
			addr = fmt.Sprintf("10.%d.%d.%d", (seq>>16)&0xff, (seq>>8)&0xff, seq&0xff)
		}
		eps[j] = &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: addr, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(8080 + seq>>24)},
			}}},
		}}}
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: ChurnAssignment,
		Endpoints:   []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}},
	}
}

// marshalAny encodes m as a google.protobuf.Any the way go-control-plane
// and the relay put it on the wire (deterministic).
func marshalAny(m proto.Message) ([]byte, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(a)
}

// AssignmentHash is the ContentHash of update seq's load assignment as
// clients receive it.
func AssignmentHash(seq int) (uint64, error) {
	b, err := marshalAny(Assignment(seq))
	if err != nil {
		return 0, err
	}
	return ContentHash(b), nil
}
