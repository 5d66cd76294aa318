package app

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// freeAddr is a loopback address nothing listens on (a port the kernel
// handed out and that was closed again).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// Start fails at each of its steps in turn, with what the steps before it
// started still running (tracing, metrics, certificate watchers, the
// upstream connection, listeners); each time nothing is left: no goroutine,
// and every address it opened can be listened on again. A relay that
// started and was closed leaves nothing either.
func TestFailedStartUndoesEverything(t *testing.T) {
	p := newPKI(t)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name    string
		edit    func(c *Config, taken func(addr string))
		wantErr string // "" : Start succeeds, and Close undoes it
	}{
		{"server tls file", func(c *Config, _ func(string)) {
			c.TLS.CertFile, c.TLS.KeyFile = missing, missing
		}, "tls: "},
		{"upstream tls file", func(c *Config, _ func(string)) {
			c.Upstream.Address, c.Upstream.TLS.CAFile = freeAddr(t), missing
		}, "upstream.tls: "},
		{"source dir", func(c *Config, _ func(string)) {
			c.Source.Dir = missing
		}, "source: "},
		{"listen port taken", func(c *Config, taken func(string)) {
			c.Upstream.Address = freeAddr(t)
			taken(c.Listen)
		}, "listen " + "127.0.0.1"},
		{"admin port taken", func(c *Config, taken func(string)) {
			taken(c.Admin)
		}, "admin listen "},
		{"admin token file", func(c *Config, _ func(string)) {
			c.Upstream.Address = freeAddr(t)
			c.AdminTokenFile = missing
		}, "admin_token_file"},
		{"rest port taken", func(c *Config, taken func(string)) {
			c.Upstream.Address = freeAddr(t)
			taken(c.REST.Listen)
		}, "rest listen "},
		{"started, then closed", func(c *Config, _ func(string)) {
			c.Upstream.Address = freeAddr(t)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Listen, cfg.Admin, cfg.REST.Listen = freeAddr(t), freeAddr(t), freeAddr(t)
			// Every part that can run on its own is on: the OTLP exporter,
			// the certificate watcher of the xDS listener, REST.
			cfg.Tracing.OTLPEndpoint = freeAddr(t)
			if tc.name != "server tls file" {
				cfg.TLS.CertFile, cfg.TLS.KeyFile = p.certFile, p.keyFile
			}
			var held []string
			tc.edit(&cfg, func(addr string) {
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = l.Close() })
				held = append(held, addr)
			})
			before := goleak.IgnoreCurrent()

			r, err := Start(cfg, testLogger(t))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				r.Close()
			} else if err == nil {
				r.Close()
				t.Fatalf("Start succeeded, want it to fail with %q", tc.wantErr)
			} else if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Start: %v, want an error containing %q", err, tc.wantErr)
			}

			goleak.VerifyNone(t, before)
			for _, addr := range []string{cfg.Listen, cfg.Admin, cfg.REST.Listen} {
				if contains(held, addr) {
					continue
				}
				l, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("%s is still in use after Start failed: %v", addr, err)
					continue
				}
				_ = l.Close()
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
