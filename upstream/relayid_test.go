package upstream

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// istiodAccepts applies istiod's checks of a node id
// (ParseServiceNodeWithMetadata, without INSTANCE_IPS): four parts, a
// sidecar or router TYPE, a valid IP.
func istiodAccepts(id string) bool {
	parts := strings.Split(id, "~")
	return len(parts) == 4 && (parts[0] == "sidecar" || parts[0] == "router") && net.ParseIP(parts[1]) != nil
}

func TestRelayIDHasIstioShape(t *testing.T) {
	self := relaySelf{host: "relay-7f9c", ip: "10.1.2.3"}
	meta := func(ns string) *structpb.Struct {
		s, _ := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "ISTIO_VERSION": "1.26.0"})
		return s
	}
	for _, tc := range []struct {
		name  string
		first *corev3.Node
		want  string
	}{
		{"istio sidecar", &corev3.Node{Id: "sidecar~10.9.9.9~reviews-v1-abc.bookinfo~bookinfo.svc.cluster.local"},
			"sidecar~10.1.2.3~xds-relay-relay-7f9c~bookinfo.svc.cluster.local"},
		{"istio gateway", &corev3.Node{Id: "router~10.9.9.8~ingress-gw-1.istio-system~istio-system.svc.cluster.local"},
			"router~10.1.2.3~xds-relay-relay-7f9c~istio-system.svc.cluster.local"},
		{"plain id with a namespace", &corev3.Node{Id: "envoy-1", Metadata: meta("shop")},
			"sidecar~10.1.2.3~xds-relay-relay-7f9c~shop.svc.cluster.local"},
		{"plain id", &corev3.Node{Id: "envoy-1"}, "sidecar~10.1.2.3~xds-relay-relay-7f9c~default.svc.cluster.local"},
		{"three parts", &corev3.Node{Id: "a~b~c"}, "sidecar~10.1.2.3~xds-relay-relay-7f9c~default.svc.cluster.local"},
		{"no node", nil, "sidecar~10.1.2.3~xds-relay-relay-7f9c~default.svc.cluster.local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := self.relayID(tc.first)
			if got != tc.want {
				t.Fatalf("relayID = %q, want %q", got, tc.want)
			}
			if !istiodAccepts(got) {
				t.Fatalf("istiod refuses %q", got)
			}
		})
	}
	if ip := localIP(); net.ParseIP(ip) == nil {
		t.Fatalf("localIP = %q", ip)
	}
}

// TestDefaultRelayIDOnTheWire: without upstream.relay_id, the node the
// relay presents is one istiod accepts ("xds-relay~HOSTNAME" was refused
// with "missing parts in the service node"), keeping the TYPE and DOMAIN of
// an Istio-shaped first node.
func TestDefaultRelayIDOnTheWire(t *testing.T) {
	srv, addr := startScripted(t)
	c, err := New(Config{Address: addr, Backoff: Backoff{Initial: time.Hour, Max: time.Hour}}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	class := attachClass(t, c, &corev3.Node{Id: "router~10.9.9.8~gw-1.edge~edge.svc.cluster.local", Cluster: "gw"})
	subscribe(t, class, xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
	id := srv.next(t).request(t).GetNode().GetId()
	host, _ := os.Hostname()
	parts := strings.Split(id, "~")
	if !istiodAccepts(id) || parts[0] != "router" || parts[2] != "xds-relay-"+host || parts[3] != "edge.svc.cluster.local" {
		t.Fatalf("upstream node id %q, want router~IP~xds-relay-%s~edge.svc.cluster.local", id, host)
	}
	if st := c.Status(); st[0].NodeID != id {
		t.Fatalf("status node id %q, want %q", st[0].NodeID, id)
	}
}
