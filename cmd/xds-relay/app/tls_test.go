package app

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// writeAtomic replaces path's contents the way a careful writer does:
// write a temporary file, rename it over path.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func testLogger(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// startTLSServer serves TLS on loopback with cfg: each connection is
// handshaken and, when that succeeds, sent one byte and closed.
func startTLSServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				tc := tls.Server(conn, cfg)
				if tc.Handshake() == nil {
					_, _ = tc.Write([]byte{1})
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		wg.Wait()
	})
	return lis.Addr().String()
}

// dialTLS connects to addr with cfg and returns the server certificate's
// serial once the server has accepted the connection (for TLS 1.3 the
// client's handshake ends before the server has checked its certificate).
func dialTLS(addr string, cfg *tls.Config) (*big.Int, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// waitSerial polls new connections until the server presents serial.
func waitSerial(t *testing.T, addr string, cfg *tls.Config, serial int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got *big.Int
	var err error
	for time.Now().Before(deadline) {
		if got, err = dialTLS(addr, cfg); err == nil && got.Int64() == serial {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("server certificate serial %v (error %v), want %d", got, err, serial)
}

// pki is a CA with server and client certificates written to a directory.
type pki struct {
	dir                         string
	ca                          *xdstest.CA
	certFile, keyFile, caFile   string
	clientCert                  tls.Certificate
	clientCertPEM, clientKeyPEM []byte
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), ca: xdstest.NewCA(t, "test CA")}
	p.certFile = filepath.Join(p.dir, "tls.crt")
	p.keyFile = filepath.Join(p.dir, "tls.key")
	p.caFile = filepath.Join(p.dir, "ca.crt")
	c, k := p.ca.Issue(t, 1, "relay.test", "127.0.0.1")
	xdstest.WriteFile(t, p.certFile, c)
	xdstest.WriteFile(t, p.keyFile, k)
	xdstest.WriteFile(t, p.caFile, p.ca.PEM)
	p.clientCertPEM, p.clientKeyPEM = p.ca.Issue(t, 100, "spiffe://test/ns/team-a/sa/x")
	p.clientCert = xdstest.KeyPair(t, p.clientCertPEM, p.clientKeyPEM)
	return p
}

// client is a TLS client config trusting p's CA, with certs.
func (p *pki) client(certs ...tls.Certificate) *tls.Config {
	return p.ca.ClientTLS("relay.test", certs...)
}

func startServerTLS(t *testing.T, cfg TLSConfig) (string, *certReloader) {
	t.Helper()
	tc, closer, err := serverTLSConfig(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("serverTLSConfig: %v", err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	return startTLSServer(t, tc), closer.(*certReloader)
}

func TestServerTLSMutual(t *testing.T) {
	p := newPKI(t)
	addr, _ := startServerTLS(t, TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile})

	if serial, err := dialTLS(addr, p.client(p.clientCert)); err != nil || serial.Int64() != 1 {
		t.Fatalf("client with a certificate: serial %v, %v; want serial 1", serial, err)
	}
	if _, err := dialTLS(addr, p.client()); err == nil {
		t.Fatal("client without a certificate: handshake succeeded, want it refused")
	} else {
		t.Logf("client without a certificate: %v", err)
	}
	other := xdstest.NewCA(t, "other CA")
	c, k := other.Issue(t, 7, "spiffe://test/ns/team-a/sa/x")
	if _, err := dialTLS(addr, p.client(xdstest.KeyPair(t, c, k))); err == nil {
		t.Fatal("client with a certificate of another CA: handshake succeeded, want it refused")
	}
	old := p.client(p.clientCert)
	old.MaxVersion = tls.VersionTLS11
	old.MinVersion = tls.VersionTLS10
	if _, err := dialTLS(addr, old); err == nil {
		t.Fatal("TLS 1.1 client: handshake succeeded, want TLS 1.2 at least")
	}
}

func TestServerTLSWithoutClientCA(t *testing.T) {
	p := newPKI(t)
	addr, _ := startServerTLS(t, TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile})
	if serial, err := dialTLS(addr, p.client()); err != nil || serial.Int64() != 1 {
		t.Fatalf("client without a certificate on a TLS-only listener: serial %v, %v; want serial 1", serial, err)
	}

	tc, closer, err := serverTLSConfig(TLSConfig{}, testLogger(t))
	if tc != nil || closer == nil || err != nil {
		t.Fatalf("serverTLSConfig(no cert) = %v, %v, %v; want nil config, a closer, no error", tc, closer, err)
	}
	_ = closer.Close()
}

func TestServerTLSConfigErrors(t *testing.T) {
	p := newPKI(t)
	other := xdstest.NewCA(t, "other")
	_, otherKey := other.Issue(t, 2, "relay.test")
	mismatched := filepath.Join(p.dir, "other.key")
	xdstest.WriteFile(t, mismatched, otherKey)
	notPEM := filepath.Join(p.dir, "junk")
	xdstest.WriteFile(t, notPEM, []byte("not PEM"))
	for _, tc := range []struct {
		cfg  TLSConfig
		want string
	}{
		{TLSConfig{CertFile: filepath.Join(p.dir, "missing.crt"), KeyFile: p.keyFile}, "missing.crt"},
		{TLSConfig{CertFile: p.certFile, KeyFile: mismatched}, "other.key"},
		{TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: notPEM}, "junk: no PEM certificate"},
	} {
		_, _, err := serverTLSConfig(tc.cfg, testLogger(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serverTLSConfig(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
	}
}

// A rotated certificate reaches new connections; a broken one is not loaded
// and the last good one stays.
func TestServerTLSReload(t *testing.T) {
	p := newPKI(t)
	addr, r := startServerTLS(t, TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile})
	client := p.client(p.clientCert)
	waitSerial(t, addr, client, 1)

	// Rotation by rename, key first (the half-rotated pair does not load).
	c, k := p.ca.Issue(t, 2, "relay.test")
	writeAtomic(t, p.keyFile, k)
	writeAtomic(t, p.certFile, c)
	waitSerial(t, addr, client, 2)

	// A broken certificate is reported and ignored.
	failures := r.failures.Load()
	xdstest.WriteFile(t, p.certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"))
	deadline := time.Now().Add(10 * time.Second)
	for r.failures.Load() == failures {
		if time.Now().After(deadline) {
			t.Fatal("the broken certificate was never reloaded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if serial, err := dialTLS(addr, client); err != nil || serial.Int64() != 2 {
		t.Fatalf("after a broken reload: serial %v, %v; want the last good serial 2", serial, err)
	}

	// In-place rewrite of both files.
	c, k = p.ca.Issue(t, 3, "relay.test")
	xdstest.WriteFile(t, p.keyFile, k)
	xdstest.WriteFile(t, p.certFile, c)
	waitSerial(t, addr, client, 3)
}

// Kubernetes secret volumes: the files are symlinks through ..data, which
// is swapped to a new timestamped directory.
func TestServerTLSReloadKubernetesSecret(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	version := func(n int, certPEM, keyPEM []byte) {
		v := filepath.Join(dir, "..v"+string(rune('0'+n)))
		if err := os.Mkdir(v, 0o700); err != nil {
			t.Fatal(err)
		}
		xdstest.WriteFile(t, filepath.Join(v, "tls.crt"), certPEM)
		xdstest.WriteFile(t, filepath.Join(v, "tls.key"), keyPEM)
		xdstest.WriteFile(t, filepath.Join(v, "ca.crt"), p.ca.PEM)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(v), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	c, k := p.ca.Issue(t, 1, "relay.test")
	version(1, c, k)
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	addr, _ := startServerTLS(t, TLSConfig{
		CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientCAFile: filepath.Join(dir, "ca.crt"),
	})
	client := p.client(p.clientCert)
	waitSerial(t, addr, client, 1)
	c, k = p.ca.Issue(t, 2, "relay.test")
	version(2, c, k)
	waitSerial(t, addr, client, 2)
}

// A new client CA file applies to new connections.
func TestServerTLSReloadClientCA(t *testing.T) {
	p := newPKI(t)
	addr, _ := startServerTLS(t, TLSConfig{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile})
	next := xdstest.NewCA(t, "next CA")
	c, k := next.Issue(t, 200, "spiffe://test/ns/team-a/sa/x")
	nextClient := p.client(xdstest.KeyPair(t, c, k))
	if _, err := dialTLS(addr, nextClient); err == nil {
		t.Fatal("client of a CA not yet trusted: accepted")
	}
	writeAtomic(t, p.caFile, next.PEM)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := dialTLS(addr, nextClient)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("client of the new CA still refused: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := dialTLS(addr, p.client(p.clientCert)); err == nil {
		t.Fatal("client of the CA no longer trusted: accepted")
	}
}

func TestCertReloaderCloseIdempotent(t *testing.T) {
	p := newPKI(t)
	r, err := newCertReloader(p.certFile, p.keyFile, p.caFile, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if r.material().cert == nil || r.material().pool == nil {
		t.Fatal("material gone after Close")
	}
}

func TestUpstreamTLSNone(t *testing.T) {
	creds, closer, err := upstreamCredentials(UpstreamTLSConfig{}, testLogger(t))
	if creds != nil || closer == nil || err != nil {
		t.Fatalf("upstreamCredentials(empty) = %v, %v, %v; want nil credentials, a closer", creds, closer, err)
	}
	creds, closer, err = upstreamCredentials(UpstreamTLSConfig{ServerName: "cp.test"}, testLogger(t))
	if err != nil || creds == nil || creds.Info().ServerName != "cp.test" {
		t.Fatalf("upstreamCredentials(server name only) = %v, %v; want TLS to cp.test", creds, err)
	}
	_ = closer.Close()
	if _, _, err := upstreamCredentials(UpstreamTLSConfig{CAFile: filepath.Join(t.TempDir(), "nope")}, testLogger(t)); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing CA file: %v, want an error naming it", err)
	}
}

// startGRPCTLS serves the health service with mTLS (certificates of ca)
// and reports each call's client certificate serial.
func startGRPCTLS(t *testing.T, ca *xdstest.CA, serial int64, name string) (string, <-chan int64) {
	t.Helper()
	c, k := ca.Issue(t, serial, name)
	serials := make(chan int64, 100)
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{xdstest.KeyPair(t, c, k)},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    ca.Pool(),
		})),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if p, ok := peer.FromContext(ctx); ok {
				if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
					select {
					case serials <- info.State.PeerCertificates[0].SerialNumber.Int64():
					default:
					}
				}
			}
			return h(ctx, req)
		}),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return xdstest.ServeGRPC(t, srv), serials
}

// check makes one health call on a new connection to addr with creds.
func check(addr string, creds credentials.TransportCredentials) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// The upstream credentials verify the control plane against the CA file
// under the server name, present the client certificate, and pick up new
// files on new connections.
func TestUpstreamTLSReload(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	cfg := UpstreamTLSConfig{
		CAFile:     filepath.Join(dir, "ca.crt"),
		CertFile:   filepath.Join(dir, "client.crt"),
		KeyFile:    filepath.Join(dir, "client.key"),
		ServerName: "control-plane.test",
	}
	xdstest.WriteFile(t, cfg.CAFile, p.ca.PEM)
	xdstest.WriteFile(t, cfg.CertFile, p.clientCertPEM)
	xdstest.WriteFile(t, cfg.KeyFile, p.clientKeyPEM)
	creds, closer, err := upstreamCredentials(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })

	addr, serials := startGRPCTLS(t, p.ca, 10, "control-plane.test")
	if err := check(addr, creds); err != nil {
		t.Fatalf("health check over mTLS: %v", err)
	}
	if got := <-serials; got != 100 {
		t.Fatalf("control plane saw client certificate serial %d, want 100", got)
	}

	// The wrong server name is refused.
	wrongName, _ := startGRPCTLS(t, p.ca, 11, "somebody-else.test")
	if err := check(wrongName, creds); err == nil {
		t.Fatal("control plane with another name: accepted")
	}

	// Rotate the client certificate: new connections present it.
	c, k := p.ca.Issue(t, 101, "spiffe://test/relay")
	writeAtomic(t, cfg.KeyFile, k)
	writeAtomic(t, cfg.CertFile, c)
	eventuallyTLS(t, "the rotated client certificate", func() error {
		if err := check(addr, creds); err != nil {
			return err
		}
		if got := <-serials; got != 101 {
			return errors.New("old client certificate")
		}
		return nil
	})

	// Move the control plane to a new CA: trusted once the CA file has it.
	next := xdstest.NewCA(t, "next CA")
	nextAddr, _ := startGRPCTLS(t, next, 12, "control-plane.test")
	if err := check(nextAddr, creds); err == nil {
		t.Fatal("control plane of an untrusted CA: accepted")
	}
	c, k = next.Issue(t, 102, "spiffe://test/relay")
	writeAtomic(t, cfg.KeyFile, k)
	writeAtomic(t, cfg.CertFile, c)
	writeAtomic(t, cfg.CAFile, next.PEM)
	eventuallyTLS(t, "the new CA", func() error { return check(nextAddr, creds) })
}

func eventuallyTLS(t *testing.T, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
