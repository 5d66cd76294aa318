package app

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"

	"go.uber.org/zap"
)

// minAdminToken is the shortest admin token accepted: a short one is
// guessable over the network.
const minAdminToken = 16

// adminToken is the bearer token the admin endpoints other than the probes
// require (admin_token_file). The file is read again on every request that
// needs it, so a rotated Secret takes effect at once; a read that fails or
// finds the file empty (mid-rotation) keeps the last good token.
type adminToken struct {
	// Set at construction, read-only.
	file string
	log  *zap.Logger

	mu      sync.Mutex
	sum     [sha256.Size]byte // SHA-256 of the last good token; guarded by mu
	seen    []byte            // the file's last contents; guarded by mu
	lastErr string            // the last reload error logged; guarded by mu
}

// newAdminToken reads file, which must hold a token of at least
// minAdminToken bytes (surrounding whitespace is ignored).
func newAdminToken(file string, log *zap.Logger) (*adminToken, error) {
	a := &adminToken{file: file, log: log}
	if err := a.reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// reload reads the file and, if it holds a valid token, makes it current.
func (a *adminToken) reload() error {
	data, err := os.ReadFile(a.file)
	if err != nil {
		return fmt.Errorf("admin_token_file: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen != nil && bytes.Equal(data, a.seen) {
		return nil
	}
	tok := bytes.TrimSpace(data)
	if len(tok) < minAdminToken {
		return fmt.Errorf("admin_token_file: %s holds %d bytes of token, want at least %d", a.file, len(tok), minAdminToken)
	}
	a.seen, a.sum = data, sha256.Sum256(tok)
	return nil
}

// allowed reports whether req carries the current token
// ("Authorization: Bearer TOKEN"). Both sides are hashed first, so the
// constant-time comparison does not reveal the token's length either.
func (a *adminToken) allowed(req *http.Request) bool {
	err := a.reload()
	a.mu.Lock()
	if msg := errText(err); msg != a.lastErr {
		a.lastErr = msg
		if err != nil { // logged once per distinct failure: requests cannot flood the log
			a.log.Warn("admin token file unusable; keeping the last good token", zap.Error(err))
		}
	}
	a.mu.Unlock()
	got, ok := bearer(req.Header.Get("Authorization"))
	if !ok {
		return false
	}
	sum := sha256.Sum256([]byte(got))
	a.mu.Lock()
	want := a.sum
	a.mu.Unlock()
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// bearer extracts the token of an "Authorization: Bearer TOKEN" header (the
// scheme is case-insensitive, RFC 6750).
func bearer(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) <= len(scheme) || !equalFoldASCII(h[:len(scheme)], scheme) {
		return "", false
	}
	return h[len(scheme):], true
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// openAdminPaths are the admin endpoints that stay open with a token set:
// the kubelet's probes and the metrics scraper. Everything else (the status
// page, /debug/ with the log level and pprof, and any endpoint added later)
// needs the token.
var openAdminPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// requireToken wraps the admin handler: without a token (nil) it is next
// unchanged.
func requireToken(tok *adminToken, next http.Handler) http.Handler {
	if tok == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if openAdminPaths[req.URL.Path] || tok.allowed(req) {
			next.ServeHTTP(w, req)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="xds-relay admin"`)
		http.Error(w, "401 unauthorized: this admin endpoint needs \"Authorization: Bearer TOKEN\" with the token of admin_token_file", http.StatusUnauthorized)
	})
}

// loopback reports whether addr (HOST:PORT) listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
