package wire

import (
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

const clusterType = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

// A body built once plus a per-stream nonce suffix must decode as the full
// DiscoveryResponse, for every stream's nonce.
func TestBodyPlusNonceDecodes(t *testing.T) {
	anys := [][]byte{
		xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"}),
		xdstest.AnyBytes(&clusterv3.Cluster{Name: "b", AltStatName: "x"}),
	}
	bb := NewBodyBuilder("v1", 0)
	for _, a := range anys {
		bb.AddResource(a)
	}
	body := bb.Finish(clusterType)
	for _, nonce := range []string{"1", "zz", "a-much-longer-nonce-value"} {
		var got discoveryv3.DiscoveryResponse
		if err := proto.Unmarshal(append(append([]byte{}, body...), NonceSuffix(nonce)...), &got); err != nil {
			t.Fatalf("nonce %q: %v", nonce, err)
		}
		if got.GetVersionInfo() != "v1" || got.GetTypeUrl() != clusterType || got.GetNonce() != nonce || len(got.GetResources()) != 2 {
			t.Fatalf("nonce %q: decoded %v", nonce, &got)
		}
		var c clusterv3.Cluster
		if err := got.GetResources()[1].UnmarshalTo(&c); err != nil || c.GetAltStatName() != "x" {
			t.Fatalf("resource 1 = %v, %v", &c, err)
		}
	}
}

func TestParseResponseRoundTrip(t *testing.T) {
	in := &discoveryv3.DiscoveryResponse{
		VersionInfo: "7",
		TypeUrl:     clusterType,
		Nonce:       "n1",
		Canary:      true,
	}
	for _, name := range []string{"a", "b"} {
		a, _ := anypb.New(&clusterv3.Cluster{Name: name})
		in.Resources = append(in.Resources, a)
	}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseResponse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.VersionInfo != "7" || got.TypeURL != clusterType || got.Nonce != "n1" || len(got.Resources) != 2 {
		t.Fatalf("got %+v", got)
	}
	for i, raw := range got.Resources {
		typeURL, value, err := ParseAny(raw)
		if err != nil || typeURL != clusterType {
			t.Fatalf("resource %d: %q %v", i, typeURL, err)
		}
		name, err := ResourceName(value)
		if err != nil || name != []string{"a", "b"}[i] {
			t.Fatalf("resource %d name %q %v", i, name, err)
		}
	}
	if _, err := ParseResponse(b[:len(b)-3]); err == nil {
		t.Fatal("truncated response parsed without error")
	}
}

func TestResourceName(t *testing.T) {
	cla, _ := proto.Marshal(&endpointv3.ClusterLoadAssignment{ClusterName: "svc"})
	noName, _ := proto.Marshal(&clusterv3.Cluster{AltStatName: "x"})
	valid, _ := proto.Marshal(&clusterv3.Cluster{Name: "c", AltStatName: "x"})
	tests := []struct {
		name    string
		value   []byte
		want    string
		wantErr bool
	}{
		{"cluster load assignment uses cluster_name", cla, "svc", false},
		{"missing name", noName, "", true},
		{"truncated", valid[:len(valid)-1], "", true},
		{"garbage", []byte{0xff, 0xff, 0xff}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResourceName(tc.value)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ResourceName = %q, %v; want %q, err=%v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// The codec hands the shared body to gRPC without copying it.
func TestCodecStampedIsZeroCopy(t *testing.T) {
	body := []byte{1, 2, 3}
	m := NewStamper(1).Stamp(NewBody(body), 7)
	out, err := NewCodec().Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || &out[0].ReadOnlyData()[0] != &body[0] || string(out[1].ReadOnlyData()) != string(NonceSuffix("7")) {
		t.Fatal("codec copied the body or lost the nonce")
	}
	out.Free()
	var raw Raw
	if err := NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(body)}, &raw); err != nil || string(raw.Bytes) != string(body) {
		t.Fatalf("raw unmarshal = %v, %v", raw.Bytes, err)
	}
	// Other types go through proto.
	req := &discoveryv3.DiscoveryRequest{TypeUrl: clusterType}
	enc, err := NewCodec().Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back discoveryv3.DiscoveryRequest
	if err := NewCodec().Unmarshal(enc, &back); err != nil || back.GetTypeUrl() != clusterType {
		t.Fatalf("proto fallback: %v %v", &back, err)
	}
}

func TestDeltaBodyDecodes(t *testing.T) {
	a := xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"})
	db := NewDeltaBodyBuilder("sys1", 0)
	db.AddEntry(DeltaEntry("a", "va", nil, a, nil))
	db.AddRemoved("gone")
	body := append(db.Finish(clusterType), NonceSuffix("n7")...)
	var got discoveryv3.DeltaDiscoveryResponse
	if err := proto.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.GetSystemVersionInfo() != "sys1" || got.GetTypeUrl() != clusterType || got.GetNonce() != "n7" ||
		len(got.GetRemovedResources()) != 1 || got.GetRemovedResources()[0] != "gone" || len(got.GetResources()) != 1 {
		t.Fatalf("decoded %v", &got)
	}
	r := got.GetResources()[0]
	var c clusterv3.Cluster
	if r.GetName() != "a" || r.GetVersion() != "va" || r.GetResource().UnmarshalTo(&c) != nil || c.GetName() != "a" {
		t.Fatalf("resource %v", r)
	}
}

func TestParseDeltaResponse(t *testing.T) {
	db := NewDeltaBodyBuilder("s", 0)
	db.AddEntry(DeltaEntry("a", "v", nil, xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"}), nil))
	db.AddRemoved("x")
	db.AddRemoved("y")
	got, err := ParseDeltaResponse(append(db.Finish(clusterType), NonceSuffix("n")...))
	if err != nil || got.SystemVersionInfo != "s" || got.TypeURL != clusterType || got.Nonce != "n" ||
		len(got.Resources) != 1 || len(got.Removed) != 2 || got.Removed[1] != "y" {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := ParseDeltaResponse([]byte{0x0a, 0x05, 'x'}); err == nil {
		t.Fatal("truncated delta response parsed")
	}
}

func TestTTLEncodings(t *testing.T) {
	a := xdstest.AnyBytes(&clusterv3.Cluster{Name: "a"})
	ttl, _ := proto.Marshal(durationpb.New(30 * time.Second))
	// Delta entry with TTL, and a heartbeat (no resource).
	db := NewDeltaBodyBuilder("s", 0)
	db.AddEntry(DeltaEntry("a", "v1", []string{"alias-a"}, a, ttl))
	db.AddEntry(DeltaEntry("b", "v2", nil, nil, ttl))
	var d discoveryv3.DeltaDiscoveryResponse
	if err := proto.Unmarshal(db.Finish(clusterType), &d); err != nil {
		t.Fatal(err)
	}
	if r := d.GetResources()[0]; r.GetTtl().AsDuration() != 30*time.Second || r.GetResource() == nil || len(r.GetAliases()) != 1 || r.GetAliases()[0] != "alias-a" {
		t.Fatalf("entry with TTL: %v", r)
	}
	if r := d.GetResources()[1]; r.GetName() != "b" || r.GetResource() != nil || r.GetTtl() == nil || r.GetVersion() != "v2" {
		t.Fatalf("heartbeat entry: %v", r)
	}
	// SotW wrapper.
	var w anypb.Any
	if err := proto.Unmarshal(WrappedAny("a", a, ttl), &w); err != nil || w.GetTypeUrl() != ResourceTypeURL {
		t.Fatalf("wrapped any: %v %v", &w, err)
	}
	var res discoveryv3.Resource
	if err := w.UnmarshalTo(&res); err != nil || res.GetName() != "a" || res.GetTtl().AsDuration() != 30*time.Second || res.GetResource().GetTypeUrl() != clusterType {
		t.Fatalf("wrapped resource: %v %v", &res, err)
	}
	parsed, err := ParseDeltaResource(appendResource(nil, "a", "v", []string{"x", "y"}, a, ttl))
	if err != nil || parsed.Name != "a" || string(parsed.TTL) != string(ttl) || parsed.Any == nil || len(parsed.Aliases) != 2 {
		t.Fatalf("ParseDeltaResource = %+v, %v", parsed, err)
	}
}
