package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
)

// Reload pacing: a change is loaded once its files have been quiet for
// reloadDebounce (a rotation writes several files); every reloadPoll the
// files are read anyway, in case a change escaped the watch (a file that is a
// symlink into a directory not watched, a network file system).
const (
	reloadDebounce = 100 * time.Millisecond
	reloadPoll     = time.Minute
)

// serverTLSConfig is the downstream listener's TLS (nil when cfg.CertFile is
// empty: plaintext). Each new connection gets the certificate and client
// CAs last loaded from the files, which are reloaded when they change; the
// Closer stops watching them (non-nil unless err is). With cfg.ClientCAFile the
// listener requires and verifies client certificates (mTLS).
func serverTLSConfig(cfg TLSConfig, log *zap.Logger) (*tls.Config, io.Closer, error) {
	if cfg.CertFile == "" {
		return nil, nopCloser{}, nil
	}
	r, err := newCertReloader(cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile, log)
	if err != nil {
		return nil, nil, err
	}
	clientAuth := tls.NoClientCert
	if cfg.ClientCAFile != "" {
		clientAuth = tls.RequireAndVerifyClientCert
	}
	forClient := func() *tls.Config {
		m := r.material()
		return &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"h2"},
			Certificates: []tls.Certificate{*m.cert},
			ClientAuth:   clientAuth,
			ClientCAs:    m.pool,
		}
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		ClientAuth: clientAuth,
		// The per-connection config carries the current certificate and
		// client CAs; GetCertificate serves a caller that bypasses it.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return forClient(), nil },
		GetCertificate:     func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.material().cert, nil },
	}, r, nil
}

// upstreamCredentials is the TLS to the control plane (nil when cfg is all
// empty: plaintext). The control plane is verified against cfg.CAFile (the
// system roots without it) under the name cfg.ServerName (the upstream
// address's host without it); cfg.CertFile and cfg.KeyFile are the relay's
// client certificate (mTLS). The files are reloaded when they change and
// each new connection uses the last loaded; the Closer stops watching them
// (non-nil unless err is).
func upstreamCredentials(cfg UpstreamTLSConfig, log *zap.Logger) (credentials.TransportCredentials, io.Closer, error) {
	if cfg == (UpstreamTLSConfig{}) {
		return nil, nopCloser{}, nil
	}
	if cfg.CAFile == "" && cfg.CertFile == "" {
		return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}), nopCloser{}, nil
	}
	r, err := newCertReloader(cfg.CertFile, cfg.KeyFile, cfg.CAFile, log)
	if err != nil {
		return nil, nil, err
	}
	return &reloadingClientCreds{r: r, serverName: cfg.ServerName}, r, nil
}

// reloadingClientCreds are TLS client credentials whose every handshake
// uses the reloader's current CA pool and client certificate: gRPC's own
// TLS credentials fix RootCAs when built.
type reloadingClientCreds struct {
	r          *certReloader
	serverName string
}

var _ credentials.TransportCredentials = (*reloadingClientCreds)(nil)

func (c *reloadingClientCreds) config() *tls.Config {
	m := c.r.material()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.serverName, RootCAs: m.pool}
	if m.cert != nil {
		cert := m.cert
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return cfg
}

func (c *reloadingClientCreds) ClientHandshake(ctx context.Context, authority string, rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.config()).ClientHandshake(ctx, authority, rawConn)
}

func (c *reloadingClientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("upstream TLS credentials are for the client side only")
}

// Info's ServerName becomes the channel's authority, which ClientHandshake
// verifies the control plane's certificate against.
func (c *reloadingClientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2", ServerName: c.serverName}
}

func (c *reloadingClientCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

func (c *reloadingClientCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// tlsMaterial is what a certReloader loaded; it is immutable.
type tlsMaterial struct {
	cert *tls.Certificate // nil without a cert file
	pool *x509.CertPool   // nil without a CA file
}

// certReloader holds a certificate/key pair and a CA pool loaded from PEM
// files and reloads them when the files change. It watches the files'
// directories, not the files: a Kubernetes secret volume swaps a symlink
// (..data) and an atomic rename replaces the inode, both of which a watch on
// the file itself would lose. A change that does not load (a half-written
// file, a key not matching its certificate) is logged and the last good
// material stays in use. It owns one goroutine, stopped by Close.
type certReloader struct {
	// Set at construction, read-only.
	certFile, keyFile, caFile string // each may be empty (not both cert and CA)
	log                       *zap.Logger
	watcher                   *fsnotify.Watcher // nil when watching failed: polling only
	debounce, poll            time.Duration
	stop, done                chan struct{}

	// Accessed atomically.
	cur atomic.Pointer[tlsMaterial]

	// reloads counts changes loaded and failures changes that did not load
	// (read by tests).
	reloads, failures atomic.Int64

	seen      [3][]byte // owned by the run goroutine after construction: the files' contents last read
	closeOnce sync.Once
	closeErr  error // written once under closeOnce (Close)
}

// newCertReloader loads the files (an error names the file; callers add
// which configuration it is) and starts watching them.
func newCertReloader(certFile, keyFile, caFile string, log *zap.Logger) (*certReloader, error) {
	r := &certReloader{
		certFile: certFile, keyFile: keyFile, caFile: caFile,
		log:      log.With(zap.Strings("tls_files", nonEmpty(certFile, keyFile, caFile))),
		debounce: reloadDebounce, poll: reloadPoll,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	contents, err := r.read()
	if err != nil {
		return nil, err
	}
	m, err := r.parse(contents)
	if err != nil {
		return nil, err
	}
	r.seen = contents
	r.cur.Store(m)

	if r.watcher, err = fsnotify.NewWatcher(); err == nil {
		for _, dir := range r.dirs() {
			if err = r.watcher.Add(dir); err != nil {
				_ = r.watcher.Close()
				r.watcher = nil
				break
			}
		}
	}
	if err != nil {
		r.log.Warn("cannot watch the TLS files; checking them for changes periodically only",
			zap.Duration("period", r.poll), zap.Error(err))
	}
	go r.run()
	return r, nil
}

func nonEmpty(names ...string) []string {
	var out []string
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// dirs are the directories holding the files, each once.
func (r *certReloader) dirs() []string {
	var out []string
	for _, f := range nonEmpty(r.certFile, r.keyFile, r.caFile) {
		d := filepath.Dir(f)
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// material is the last good material.
func (r *certReloader) material() *tlsMaterial { return r.cur.Load() }

// read returns the contents of the cert, key and CA files ("" names read
// as nil).
func (r *certReloader) read() ([3][]byte, error) {
	var out [3][]byte
	for i, name := range [3]string{r.certFile, r.keyFile, r.caFile} {
		if name == "" {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return out, err
		}
		out[i] = b
	}
	return out, nil
}

func (r *certReloader) parse(contents [3][]byte) (*tlsMaterial, error) {
	m := &tlsMaterial{}
	if r.certFile != "" {
		cert, err := tls.X509KeyPair(contents[0], contents[1])
		if err != nil {
			return nil, fmt.Errorf("load %s and %s: %w", r.certFile, r.keyFile, err)
		}
		m.cert = &cert
	}
	if r.caFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(contents[2]) {
			return nil, fmt.Errorf("load %s: no PEM certificate in it", r.caFile)
		}
		m.pool = pool
	}
	return m, nil
}

// reload loads the files if their contents changed since last read.
func (r *certReloader) reload() {
	contents, err := r.read()
	if err != nil {
		// Mid-rotation a file may be briefly missing: keep the last
		// contents seen so the next event retries.
		r.failures.Add(1)
		r.log.Error("reloading TLS files failed; keeping the last good certificates", zap.Error(err))
		return
	}
	if bytes.Equal(contents[0], r.seen[0]) && bytes.Equal(contents[1], r.seen[1]) && bytes.Equal(contents[2], r.seen[2]) {
		return
	}
	r.seen = contents
	m, err := r.parse(contents)
	if err != nil {
		r.failures.Add(1)
		r.log.Error("reloading TLS files failed; keeping the last good certificates", zap.Error(err))
		return
	}
	r.cur.Store(m)
	r.reloads.Add(1)
	fields := []zap.Field{}
	if m.cert != nil && m.cert.Leaf != nil {
		fields = append(fields, zap.String("serial", m.cert.Leaf.SerialNumber.String()),
			zap.Time("not_after", m.cert.Leaf.NotAfter))
	}
	r.log.Info("TLS files reloaded", fields...)
}

func (r *certReloader) run() {
	defer close(r.done)
	var events <-chan fsnotify.Event
	var errs <-chan error
	if r.watcher != nil {
		events, errs = r.watcher.Events, r.watcher.Errors
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	poll := time.NewTicker(r.poll)
	defer poll.Stop()
	for {
		select {
		case <-r.stop:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			debounce.Reset(r.debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.log.Warn("watching the TLS files", zap.Error(err))
			debounce.Reset(r.debounce) // events may have been lost
		case <-debounce.C:
			r.reload()
		case <-poll.C:
			r.reload()
		}
	}
}

// Close stops watching the files; the material stays usable. It waits for
// the goroutine and is idempotent.
func (r *certReloader) Close() error {
	r.closeOnce.Do(func() {
		close(r.stop)
		<-r.done
		if r.watcher != nil {
			r.closeErr = r.watcher.Close()
		}
	})
	return r.closeErr
}

// withNextProtos is base (a serverTLSConfig) offering protos by ALPN
// instead: the REST listener's TLS, with the same reloaded certificate and
// client CAs as the xDS listener, for HTTP/2 and HTTP/1.1 clients.
func withNextProtos(base *tls.Config, protos ...string) *tls.Config {
	c := base.Clone()
	c.NextProtos = protos
	forClient := base.GetConfigForClient
	c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		cc, err := forClient(hello)
		if cc != nil {
			cc.NextProtos = protos // a fresh config per connection
		}
		return cc, err
	}
	return c
}
