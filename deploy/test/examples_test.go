package deploytest

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	envoyBootstrap = "envoy-bootstrap.yaml"
	grpcBootstrap  = "grpc-xds-bootstrap.json"
	httpOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// relayTarget is the HOST:PORT clients dial: the Service of the raw manifests.
func relayTarget(s installation) string {
	return net.JoinHostPort(s.service.Name+"."+s.service.Namespace+".svc", strconv.Itoa(int(s.grpcPort)))
}

// TestEnvoyBootstrap parses the Envoy example strictly into the v3 Bootstrap
// and runs its generated validation rules.
func TestEnvoyBootstrap(t *testing.T) {
	b := loadEnvoyBootstrap(t)
	if err := b.ValidateAll(); err != nil {
		t.Errorf("%s: %v", envoyBootstrap, err)
	}
	if b.GetNode().GetId() == "" || b.GetNode().GetCluster() == "" {
		t.Errorf("node id %q cluster %q: both are needed (cluster is the default node class)", b.GetNode().GetId(), b.GetNode().GetCluster())
	}
	dr := b.GetDynamicResources()
	ads := dr.GetAdsConfig()
	if ads.GetApiType() != corev3.ApiConfigSource_GRPC && ads.GetApiType() != corev3.ApiConfigSource_DELTA_GRPC {
		t.Errorf("ads_config.api_type %v, want GRPC or DELTA_GRPC", ads.GetApiType())
	}
	if ads.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("ads_config.transport_api_version %v, want V3", ads.GetTransportApiVersion())
	}
	if len(ads.GetGrpcServices()) != 1 || ads.GetGrpcServices()[0].GetEnvoyGrpc() == nil {
		t.Fatalf("ads_config.grpc_services: want one envoy_grpc service, got %v", ads.GetGrpcServices())
	}
	for name, cs := range map[string]*corev3.ConfigSource{"lds_config": dr.GetLdsConfig(), "cds_config": dr.GetCdsConfig()} {
		if cs.GetAds() == nil || cs.GetResourceApiVersion() != corev3.ApiVersion_V3 {
			t.Errorf("%s: want {ads: {}, resource_api_version: V3}, got %v", name, cs)
		}
	}
	name := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	var xds *clusterv3.Cluster
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			xds = c
		}
	}
	if xds == nil {
		t.Fatalf("ADS cluster %q is not a static cluster", name)
	}
	anyOpts, ok := xds.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if !ok {
		t.Fatalf("cluster %s: no %s (gRPC needs HTTP/2)", name, httpOptionsKey)
	}
	var opts httpv3.HttpProtocolOptions
	if err := anyOpts.UnmarshalTo(&opts); err != nil {
		t.Fatalf("cluster %s: %s: %v", name, httpOptionsKey, err)
	}
	h2 := opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions()
	if h2 == nil {
		t.Errorf("cluster %s: not explicit_http_config.http2_protocol_options", name)
	} else if h2.GetConnectionKeepalive().GetInterval().AsDuration() < 15e9 && h2.GetConnectionKeepalive() != nil {
		// The relay's keepalive enforcement (MinTime 15s) answers more
		// frequent pings with GOAWAY too_many_pings.
		t.Errorf("cluster %s: HTTP/2 keepalive interval %v is below the relay's 15s minimum", name, h2.GetConnectionKeepalive().GetInterval().AsDuration())
	}
	if ka := xds.GetUpstreamConnectionOptions().GetTcpKeepalive(); ka == nil {
		t.Errorf("cluster %s: no upstream_connection_options.tcp_keepalive", name)
	}
	eps := xds.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		t.Fatalf("cluster %s: want one endpoint (the relay Service), got %v", name, eps)
	}
	sa := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if got, want := net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))), relayTarget(rawInstallation(t)); got != want {
		t.Errorf("cluster %s points at %s, the relay Service is %s", name, got, want)
	}
}

func loadEnvoyBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesDir, envoyBootstrap))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		t.Fatalf("%s: %v", envoyBootstrap, err)
	}
	var b bootstrapv3.Bootstrap
	// DiscardUnknown false: an unknown field (or an Any of an unlinked type) fails.
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, &b); err != nil {
		t.Fatalf("%s: %v", envoyBootstrap, err)
	}
	return &b
}

// grpcBootstrapFile mirrors gRPC's xDS bootstrap format (gRFC A27 and later);
// decoded with unknown fields disallowed.
type grpcBootstrapFile struct {
	XDSServers []struct {
		ServerURI    string `json:"server_uri"`
		ChannelCreds []struct {
			Type   string          `json:"type"`
			Config json.RawMessage `json:"config,omitempty"`
		} `json:"channel_creds"`
		ServerFeatures []string `json:"server_features"`
	} `json:"xds_servers"`
	Node struct {
		ID       string `json:"id"`
		Cluster  string `json:"cluster"`
		Locality struct {
			Region  string `json:"region"`
			Zone    string `json:"zone"`
			SubZone string `json:"sub_zone"`
		} `json:"locality"`
		Metadata map[string]any `json:"metadata,omitempty"`
	} `json:"node"`
	CertificateProviders                      json.RawMessage `json:"certificate_providers,omitempty"`
	ServerListenerResourceNameTemplate        string          `json:"server_listener_resource_name_template,omitempty"`
	ClientDefaultListenerResourceNameTemplate string          `json:"client_default_listener_resource_name_template,omitempty"`
	Authorities                               json.RawMessage `json:"authorities,omitempty"`
}

func TestGRPCBootstrap(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(examplesDir, grpcBootstrap))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var b grpcBootstrapFile
	if err := dec.Decode(&b); err != nil {
		t.Fatalf("%s: %v", grpcBootstrap, err)
	}
	if dec.More() {
		t.Errorf("%s: data after the JSON object", grpcBootstrap)
	}
	if len(b.XDSServers) != 1 {
		t.Fatalf("%s: %d xds_servers, want 1 (the relay Service)", grpcBootstrap, len(b.XDSServers))
	}
	srv := b.XDSServers[0]
	if want := relayTarget(rawInstallation(t)); srv.ServerURI != want {
		t.Errorf("server_uri %q, the relay Service is %q", srv.ServerURI, want)
	}
	if len(srv.ChannelCreds) == 0 || srv.ChannelCreds[0].Type != "insecure" {
		t.Errorf("channel_creds %+v: the relay listens in plaintext, want insecure first", srv.ChannelCreds)
	}
	if !slices.Contains(srv.ServerFeatures, "xds_v3") {
		t.Errorf("server_features %v lacks xds_v3", srv.ServerFeatures)
	}
	if b.Node.ID == "" || b.Node.Cluster == "" {
		t.Errorf("node id %q cluster %q: both are needed", b.Node.ID, b.Node.Cluster)
	}
	if b.Node.Locality.Region == "" {
		t.Errorf("node.locality.region is empty")
	}
}

// rawInstallation decodes deploy/kubernetes for the examples' checks (without
// re-running the installation checks' reporting).
func rawInstallation(t *testing.T) installation {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	var objs []object
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeStrict(f, data)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o...)
	}
	var s installation
	// The Service's xDS port: the one with appProtocol grpc.
	for _, o := range objs {
		if svc, ok := o.obj.(*corev1.Service); ok {
			s.service = svc
			for _, p := range svc.Spec.Ports {
				if p.AppProtocol != nil && *p.AppProtocol == "grpc" {
					s.grpcPort = p.Port
				}
			}
		}
	}
	if s.service == nil || s.grpcPort == 0 {
		t.Fatalf("deploy/kubernetes has no Service with a grpc port")
	}
	return s
}
