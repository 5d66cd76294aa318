package app_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// privateKey is the secret material the tests' Secrets carry; no response
// to a refused client may contain it.
const privateKey = "-----BEGIN PRIVATE KEY----- e2e-secret-material"

// withSecret is res plus an SDS Secret holding privateKey.
func withSecret(res map[resource.Type][]types.Resource) map[resource.Type][]types.Resource {
	res[resource.SecretType] = []types.Resource{&tlsv3.Secret{
		Name: "server-cert",
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "cert"}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: privateKey}},
		}},
	}}
	return res
}

// restPost POSTs a DiscoveryRequest for node to the REST endpoint path with
// client (Secrets by name, as Envoy asks for them, the rest as a wildcard);
// err is a transport error (no HTTP answer).
func restPost(ctx context.Context, client *http.Client, url string, node *corev3.Node) (code int, proto, body string, err error) {
	names := ""
	if strings.HasSuffix(url, ":secrets") {
		names = `, "resource_names": ["server-cert"]`
	}
	resp, b, err := post(ctx, client, url, `{"node": {"id": "`+node.GetId()+`", "cluster": "`+node.GetCluster()+`"}`+names+`}`)
	if err != nil {
		return 0, "", "", err
	}
	return resp.StatusCode, resp.Proto, b, nil
}

// post POSTs body to url and returns the response (its body read and
// closed) and the body.
func post(ctx context.Context, client *http.Client, url, body string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// httpsClient is an HTTPS client trusting ca, presenting certs; h2 forces
// HTTP/2 (else HTTP/1.1 only).
func httpsClient(ca *e2eCA, h2 bool, certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   ca.ClientTLS("relay.test", certs...),
		DisableKeepAlives: true,
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr}
}

// TestE2ERESTFollowsTLS (issue 12, B5): with tls.client_ca_file, identity
// rules and rest.listen, REST is served over mTLS only, with the rules
// applied as on gRPC: plain HTTP and HTTPS without a client certificate get
// nothing (before, a plain-HTTP POST /v3/discovery:secrets returned the
// private key); a certificate claiming another class's node gets 403 and
// creates no class; the relay's certificate reload applies to REST too.
func TestE2ERESTFollowsTLS(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "team-a", "v1", withSecret(clusters("a-backend")))
	m.Set(t, "team-b", "v1", withSecret(clusters("b-backend")))

	ca := newE2ECA(t)
	teamA := ca.teamA(t)
	r := startRelay(t, m.Addr, ca.mutualTLS(t), withConfig(func(cfg *app.Config) {
		cfg.REST.Listen = "127.0.0.1:0"
		cfg.REST.MaxHold = 10 * time.Second // the first poll waits for the upstream's answer
	}))
	https := "https://" + r.RESTAddr()
	own := &corev3.Node{Id: "sidecar~team-a~1", Cluster: "team-a"}

	// Plain HTTP: no answer carries resources.
	for _, path := range []string{"/v3/discovery:secrets", "/v3/discovery:clusters"} {
		code, _, body, err := restPost(ctx, httpClient, "http://"+r.RESTAddr()+path, own)
		if err == nil && (code == http.StatusOK || strings.Contains(body, "e2e-secret-material") || strings.Contains(body, "a-backend")) {
			t.Fatalf("plain-HTTP POST %s: %d %q, want no resources over plaintext", path, code, body)
		}
	}
	// HTTPS without a client certificate: the handshake is refused.
	if code, _, body, err := restPost(ctx, httpsClient(ca, true), https+"/v3/discovery:secrets", own); err == nil {
		t.Fatalf("HTTPS without a client certificate: %d %q, want the handshake refused", code, body)
	}

	// Its own node, over HTTP/2 and HTTP/1.1: served, Secrets included
	// (the certificate is verified).
	for _, h2 := range []bool{true, false} {
		code, proto, body, err := restPost(ctx, httpsClient(ca, h2, teamA), https+"/v3/discovery:clusters", own)
		if err != nil || code != http.StatusOK || !strings.Contains(body, "a-backend") {
			t.Fatalf("team-a over HTTPS (h2 %v): %d %q %v, want its clusters", h2, code, body, err)
		}
		if want := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]; proto != want {
			t.Errorf("REST answered over %s, want %s", proto, want)
		}
	}
	if code, _, body, err := restPost(ctx, httpsClient(ca, true, teamA), https+"/v3/discovery:secrets", own); err != nil || code != http.StatusOK || !strings.Contains(body, "e2e-secret-material") {
		t.Fatalf("team-a's Secret over mTLS: %d %q %v, want it served", code, body, err)
	}

	// Another class, or another namespace's node id: 403 naming the
	// identity, as PERMISSION_DENIED on gRPC.
	for _, n := range []*corev3.Node{
		{Id: "sidecar~team-a~2", Cluster: "team-b"},
		{Id: "sidecar~team-b~1", Cluster: "team-a"},
	} {
		for _, path := range []string{"/v3/discovery:clusters", "/v3/discovery:secrets"} {
			code, _, body, err := restPost(ctx, httpsClient(ca, true, teamA), https+path, n)
			if err != nil || code != http.StatusForbidden {
				t.Fatalf("team-a certificate as %s/%s on %s: %d %q %v, want 403", n.GetId(), n.GetCluster(), path, code, body, err)
			}
			if !strings.Contains(body, "PermissionDenied") || !strings.Contains(body, "spiffe://test/ns/team-a/sa/x") ||
				strings.Contains(body, "b-backend") || strings.Contains(body, "e2e-secret-material") {
				t.Errorf("403 body %q should name the identity and carry no resource", body)
			}
		}
	}
	for _, c := range r.Registry().Classes() {
		if c.Name != "team-a" {
			t.Errorf("relay has class %q: a denied REST claim must create nothing", c.Name)
		}
	}

	// The relay's certificate is reloaded for REST as for gRPC.
	first := restServerSerial(t, r.RESTAddr(), ca, teamA)
	ca.issue(t, "relay", "relay.test", "127.0.0.1") // rewrites relay.crt and relay.key
	eventually(t, ctx, "REST to present the reloaded certificate", func() bool {
		return restServerSerial(t, r.RESTAddr(), ca, teamA) != first
	})
}

// restServerSerial is the serial number of the certificate the REST
// listener presents.
func restServerSerial(t *testing.T, addr string, ca *e2eCA, cert tls.Certificate) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, ca.ClientTLS("relay.test", cert))
	if err != nil {
		t.Fatalf("TLS to the REST listener: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// firstSecret opens a stream of one of the three gRPC variants that can ask
// for Secrets, asks for them as node and returns the first response or the
// status that ended the stream.
func firstSecret(t *testing.T, ctx context.Context, addr string, creds credentials.TransportCredentials, variant string, node *corev3.Node) (any, error) {
	t.Helper()
	opts := map[string]xdstest.Options{
		"ads":       {ADS: true},
		"sds":       {},
		"delta-ads": {ADS: true, Delta: true},
	}[variant]
	opts.Node, opts.Creds = node, creds
	c := dialClient(t, ctx, addr, opts)
	defer c.Close()
	resp, err := c.first(resource.SecretType, []string{"server-cert"}, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// TestE2ESecretsNeedVerifiedClientCert (issue 12, B5): Secrets are refused,
// on gRPC (ADS, SDS, delta ADS) and REST, with PERMISSION_DENIED naming
// tls.allow_secrets_without_client_cert, to a client without a verified
// client certificate (here plaintext, and TLS without client CAs); other
// types are served to it as before. With the key set they are served.
func TestE2ESecretsNeedVerifiedClientCert(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", withSecret(clusters("a")))
	node := &corev3.Node{Id: "sds-1", Cluster: "class-a"}

	ca := newE2ECA(t)
	relayCert, relayKey, _ := ca.issue(t, "relay", "relay.test", "127.0.0.1")
	for _, tc := range []struct {
		name  string
		tls   bool // server TLS, no client CA
		allow bool
	}{
		{"plaintext", false, false},
		{"TLS without client certificates", true, false},
		{"plaintext, allowed by tls.allow_secrets_without_client_cert", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startRelay(t, m.Addr, withConfig(func(cfg *app.Config) {
				if tc.tls {
					cfg.TLS = app.TLSConfig{CertFile: relayCert, KeyFile: relayKey}
				}
				cfg.TLS.AllowSecretsWithoutClientCert = tc.allow
				cfg.REST.Listen = "127.0.0.1:0"
				cfg.REST.MaxHold = 10 * time.Second
			}))
			creds, client, scheme := insecure.NewCredentials(), httpClient, "http://"
			if tc.tls {
				creds = credentials.NewTLS(ca.ClientTLS("relay.test"))
				client, scheme = httpsClient(ca, true), "https://"
			}
			for _, variant := range []string{"ads", "sds", "delta-ads"} {
				resp, err := firstSecret(t, ctx, r.Addr(), creds, variant, node)
				if tc.allow {
					if err != nil {
						t.Errorf("%s: %v, want the Secret", variant, err)
					}
					continue
				}
				if resp != nil || status.Code(err) != codes.PermissionDenied ||
					!strings.Contains(status.Convert(err).Message(), "tls.allow_secrets_without_client_cert") {
					t.Errorf("%s: response %v, error %v; want PermissionDenied naming tls.allow_secrets_without_client_cert and nothing else", variant, resp != nil, err)
				}
			}
			code, _, body, err := restPost(ctx, client, scheme+r.RESTAddr()+"/v3/discovery:secrets", node)
			switch {
			case err != nil:
				t.Fatalf("REST secrets: %v", err)
			case tc.allow && (code != http.StatusOK || !strings.Contains(body, "e2e-secret-material")):
				t.Errorf("REST secrets: %d %q, want the Secret", code, body)
			case !tc.allow && (code != http.StatusForbidden || !strings.Contains(body, "tls.allow_secrets_without_client_cert") || strings.Contains(body, "e2e-secret-material")):
				t.Errorf("REST secrets: %d %q, want 403 naming tls.allow_secrets_without_client_cert", code, body)
			}
			// Other types are unaffected.
			if code, _, body, err := restPost(ctx, client, scheme+r.RESTAddr()+"/v3/discovery:clusters", node); err != nil || code != http.StatusOK {
				t.Errorf("REST clusters: %d %q %v, want 200", code, body, err)
			}
		})
	}
}
