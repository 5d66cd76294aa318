package app_test

// These end-to-end tests configure TLS through app.Config (tls.*,
// identity.rules, upstream.tls.*). They need app.Start to wire that
// configuration in: serverTLSConfig → grpc.Creds on the downstream server,
// identity.NewBinder(cfg.Identity.Rules) → relay.Options.Authorize, and
// upstreamCredentials → upstream.Config.DialOptions. Until that wiring
// lands they fail (the relay serves plaintext and ignores the rules): that
// failure is expected, and the probe below says so.

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// e2eCA is a test CA writing the certificates it issues to a test
// directory.
type e2eCA struct {
	*xdstest.CA
	dir  string
	file string // the CA certificate's PEM file
}

func newE2ECA(t *testing.T) *e2eCA {
	t.Helper()
	ca, dir := xdstest.NewCA(t, "e2e CA"), t.TempDir()
	return &e2eCA{CA: ca, dir: dir, file: ca.WriteCA(t, dir)}
}

// issue writes NAME.crt and NAME.key for a leaf with these SANs and returns
// the files and the key pair.
func (ca *e2eCA) issue(t *testing.T, name string, sans ...string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	return ca.IssueFiles(t, ca.dir, name, sans...)
}

// mutualTLS serves xDS with a certificate of the CA for relay.test,
// requiring client certificates of the CA, with one identity rule: a
// client of spiffe://test/ns/NS/sa/* may be node sidecar~NS~* of class NS.
func (ca *e2eCA) mutualTLS(t *testing.T) relayOption {
	t.Helper()
	relayCert, relayKey, _ := ca.issue(t, "relay", "relay.test", "127.0.0.1")
	return withConfig(func(cfg *app.Config) {
		cfg.TLS = app.TLSConfig{CertFile: relayCert, KeyFile: relayKey, ClientCAFile: ca.file}
		cfg.Identity.Rules = []app.IdentityRule{{
			SAN:    `spiffe://test/ns/(?P<ns>[a-z-]+)/sa/.+`,
			NodeID: `sidecar~${ns}~.*`,
			Class:  `${ns}`,
		}}
	})
}

// teamA is a client certificate of namespace team-a.
func (ca *e2eCA) teamA(t *testing.T) tls.Certificate {
	t.Helper()
	_, _, pair := ca.issue(t, "team-a", "spiffe://test/ns/team-a/sa/x")
	return pair
}

// requireTLSListener fails the test early, and says why, when the relay
// does not speak TLS on its xDS listener: app.Start does not wire cfg.TLS yet.
func requireTLSListener(t *testing.T, addr string, tc *tls.Config) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		t.Fatalf("TLS handshake with the relay's xDS listener: %v\n"+
			"(expected until app.Start wires cfg.TLS / cfg.Identity / cfg.Upstream.TLS; see tls.go)", err)
	}
	_ = conn.Close()
}

// tlsADSResult is what one ADS stream got: its first response, or the
// status that ended it.
type tlsADSResult struct {
	resp *discoveryv3.DiscoveryResponse
	err  error
}

// adsOverTLS opens an ADS stream to addr with creds, sends node's CDS
// wildcard request and waits for the first response or the end of the
// stream.
func adsOverTLS(t *testing.T, ctx context.Context, addr string, creds credentials.TransportCredentials, node *corev3.Node) tlsADSResult {
	t.Helper()
	c := dialClient(t, ctx, addr, xdstest.Options{Node: node, ADS: true, Creds: creds})
	defer c.Close()
	resp, err := c.first(resource.ClusterType, nil, 10*time.Second)
	r, _ := resp.(*discoveryv3.DiscoveryResponse)
	return tlsADSResult{resp: r, err: err}
}

// TestE2ETLSIdentityBinding: a relay with mTLS and a SPIFFE identity rule.
// A client whose certificate is spiffe://test/ns/team-a/sa/x gets team-a's
// clusters as node sidecar~team-a~1; the same certificate claiming class
// team-b, or another namespace's node id, gets PermissionDenied and nothing
// else (no class, no upstream stream); a client without a certificate, or
// in plaintext, does not get through the handshake.
//
// Needs app.Start to wire cfg.TLS and cfg.Identity (see the file comment).
func TestE2ETLSIdentityBinding(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "team-a", "v1", clusters("a-backend", "a-frontend"))
	m.Set(t, "team-b", "v1", clusters("b-secret"))

	ca := newE2ECA(t)
	teamA := ca.teamA(t)
	r := startRelay(t, m.Addr, ca.mutualTLS(t))
	clientTLS := func(certs ...tls.Certificate) *tls.Config { return ca.ClientTLS("relay.test", certs...) }
	requireTLSListener(t, r.Addr(), clientTLS(teamA))
	withCert := credentials.NewTLS(clientTLS(teamA))

	// Allowed: its namespace's node id and class.
	got := adsOverTLS(t, ctx, r.Addr(), withCert, &corev3.Node{Id: "sidecar~team-a~1", Cluster: "team-a"})
	if got.err != nil {
		t.Fatalf("team-a client as sidecar~team-a~1: %v, want team-a's clusters", got.err)
	}
	if names := clusterNames(t, got.resp); !slices.Equal(names, []string{"a-backend", "a-frontend"}) {
		t.Fatalf("team-a client got clusters %v, want [a-backend a-frontend]", names)
	}

	// Denied: another class, or another namespace's node id. The status is
	// the first and only thing the stream gets.
	for _, n := range []*corev3.Node{
		{Id: "sidecar~team-a~2", Cluster: "team-b"},
		{Id: "sidecar~team-b~1", Cluster: "team-a"},
	} {
		got := adsOverTLS(t, ctx, r.Addr(), withCert, n)
		if got.resp != nil {
			t.Fatalf("team-a client as %s/%s got a response (%d resources), want PermissionDenied and nothing else",
				n.GetId(), n.GetCluster(), len(got.resp.GetResources()))
		}
		if status.Code(got.err) != codes.PermissionDenied {
			t.Fatalf("team-a client as %s/%s: %v, want PermissionDenied", n.GetId(), n.GetCluster(), got.err)
		}
		msg := status.Convert(got.err).Message()
		if !strings.Contains(msg, "spiffe://test/ns/team-a/sa/x") || !strings.Contains(msg, n.GetId()) {
			t.Errorf("PermissionDenied message %q should name the node and the client identity", msg)
		}
	}
	if classes := r.Registry().Classes(); len(classes) != 1 || classes[0].Name != "team-a" {
		var names []string
		for _, c := range classes {
			names = append(names, c.Name)
		}
		t.Errorf("relay classes %v, want only team-a: a denied claim must create nothing", names)
	}
	_, nodes := m.Streams()
	for _, n := range nodes {
		if n.GetCluster() != "team-a" {
			t.Errorf("the control plane served class %q: a denied claim must not reach it", n.GetCluster())
		}
	}

	// No client certificate: the handshake fails, the stream never opens.
	for name, creds := range map[string]credentials.TransportCredentials{
		"TLS without a client certificate": credentials.NewTLS(clientTLS()),
		"plaintext":                        insecure.NewCredentials(),
	} {
		got := adsOverTLS(t, ctx, r.Addr(), creds, &corev3.Node{Id: "sidecar~team-a~3", Cluster: "team-a"})
		if got.resp != nil || status.Code(got.err) != codes.Unavailable {
			t.Errorf("%s: response %v, error %v; want Unavailable (no connection) and no response", name, got.resp != nil, got.err)
		}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.Addr(), clientTLS())
	if err == nil {
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake ends, and answers with an alert.
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		_ = conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("TLS without a client certificate: %v, want the handshake refused (certificate required)", err)
	}
}

// startTLSMgmt starts a control plane requiring mTLS as name, and returns
// it and the URI SANs of the clients it served so far.
func startTLSMgmt(t *testing.T, ca *e2eCA, name string) (*controlPlane, func() []string) {
	t.Helper()
	_, _, pair := ca.issue(t, "control-plane", name)
	var mu sync.Mutex
	var uris []string // guarded by mu
	m := startMgmt(t, "127.0.0.1:0", func(o *xdstest.CPOptions) {
		o.ServerOptions = []grpc.ServerOption{
			grpc.Creds(credentials.NewTLS(&tls.Config{
				Certificates: []tls.Certificate{pair},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    ca.Pool(),
				MinVersion:   tls.VersionTLS12,
			})),
			grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if p, ok := peer.FromContext(ss.Context()); ok {
					if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
						mu.Lock()
						for _, u := range info.State.PeerCertificates[0].URIs {
							uris = append(uris, u.String())
						}
						mu.Unlock()
					}
				}
				return h(srv, ss)
			}),
		}
	})
	return m, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(uris)
	}
}

// TestE2ETLSUpstream: the relay reaches a control plane that requires mTLS,
// verifying it under upstream.tls.server_name against upstream.tls.ca_file
// and presenting its own certificate; a plaintext client of the relay gets
// the control plane's clusters.
//
// Needs app.Start to wire cfg.Upstream.TLS (see the file comment).
func TestE2ETLSUpstream(t *testing.T) {
	ctx := testContext(t)
	ca := newE2ECA(t)
	m, clientURIs := startTLSMgmt(t, ca, "control-plane.test")
	m.Set(t, "team-a", "v1", clusters("tls-backend"))
	relayCert, relayKey, _ := ca.issue(t, "relay-client", "spiffe://test/relay")
	r := startRelay(t, m.Addr, withConfig(func(cfg *app.Config) {
		cfg.Upstream.TLS = app.UpstreamTLSConfig{
			CAFile: ca.file, CertFile: relayCert, KeyFile: relayKey, ServerName: "control-plane.test",
		}
	}))

	c := dialADS(t, ctx, r.Addr(), "n1", "team-a")
	c.Subscribe(resource.ClusterType)
	resp, err := c.next(10 * time.Second)
	if err != nil {
		t.Fatalf("no clusters through the relay from the mTLS control plane: %v\n"+
			"(expected until app.Start wires cfg.Upstream.TLS; see tls.go)", err)
	}
	if names := clusterNames(t, resp); !slices.Equal(names, []string{"tls-backend"}) {
		t.Fatalf("got clusters %v, want [tls-backend]", names)
	}
	if uris := clientURIs(); !slices.Contains(uris, "spiffe://test/relay") {
		t.Errorf("control plane saw client identities %v, want the relay's spiffe://test/relay", uris)
	}
}
