package app_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// adminDo sends one admin request with token (none when empty) and returns
// the status, the WWW-Authenticate header and the body.
func adminDo(t *testing.T, ctx context.Context, method, url, token, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

// TestE2EAdminToken: with admin_token_file, pprof, /debug/ (the log level
// change included) and the status page answer 401 with WWW-Authenticate
// unless the request carries the token; the probes and /metrics stay open;
// a rotated token file takes effect at once.
func TestE2EAdminToken(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "s3cret-admin-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin, cfg.Upstream.Address = "127.0.0.1:0", "127.0.0.1:0", m.Addr
	cfg.AdminTokenFile = tokenFile
	level := zap.NewAtomicLevelAt(zap.InfoLevel)
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), app.WithLogLevel(level))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	base := "http://" + r.AdminAddr()

	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, body := adminDo(t, ctx, http.MethodGet, base+path, "", ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s, want 200 (probes and scrapers stay open)", path, code, body)
		}
	}
	protected := []string{"/", "/debug/classes", "/debug/shards", "/debug/streams", "/debug/upstream", "/debug/logging",
		"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/nothing-here", "//debug/pprof/cmdline"}
	for _, tok := range []string{"", "wrong-token-of-the-same-size-x", token + "x", strings.ToUpper(token)} {
		for _, path := range protected {
			code, auth, body := adminDo(t, ctx, http.MethodGet, base+path, tok, "")
			if code != http.StatusUnauthorized || !strings.HasPrefix(auth, "Bearer ") {
				t.Errorf("GET %s with token %q: %d (WWW-Authenticate %q), want 401 with a Bearer challenge", path, tok, code, auth)
			}
			if strings.Contains(body, "xds-relay") && strings.Contains(body, "-test") {
				t.Errorf("GET %s with token %q leaked the command line: %s", path, tok, body)
			}
		}
		if code, _, _ := adminDo(t, ctx, http.MethodPut, base+"/debug/logging", tok, `{"level":"error"}`); code != http.StatusUnauthorized {
			t.Errorf("PUT /debug/logging with token %q: %d, want 401", tok, code)
		}
	}
	if level.Level() != zap.InfoLevel {
		t.Fatalf("log level %v after unauthorized PUTs, want info", level.Level())
	}

	for _, path := range []string{"/", "/debug/classes", "/debug/upstream", "/debug/pprof/cmdline", "/debug/logging"} {
		if code, _, body := adminDo(t, ctx, http.MethodGet, base+path, token, ""); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d %s, want 200", path, code, body)
		}
	}
	if code, _, body := adminDo(t, ctx, http.MethodPut, base+"/debug/logging", token, `{"level":"error"}`); code != http.StatusOK || level.Level() != zap.ErrorLevel {
		t.Errorf("PUT /debug/logging with the token: %d %s, level %v; want 200 and error", code, body, level.Level())
	}

	// Rotation: the file is read again on the next request.
	const rotated = "rotated-admin-token-9876543210"
	if err := os.WriteFile(tokenFile, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := adminDo(t, ctx, http.MethodGet, base+"/debug/classes", token, ""); code != http.StatusUnauthorized {
		t.Errorf("the old token after rotation: %d, want 401", code)
	}
	if code, _, _ := adminDo(t, ctx, http.MethodGet, base+"/debug/classes", rotated, ""); code != http.StatusOK {
		t.Errorf("the rotated token: %d, want 200", code)
	}
	// A file emptied mid-rotation keeps the last good token.
	if err := os.WriteFile(tokenFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := adminDo(t, ctx, http.MethodGet, base+"/debug/classes", rotated, ""); code != http.StatusOK {
		t.Errorf("the last good token with the file emptied: %d, want 200", code)
	}
	if code, _, _ := adminDo(t, ctx, http.MethodGet, base+"/debug/classes", "", ""); code != http.StatusUnauthorized {
		t.Errorf("no token with the file emptied: %d, want 401", code)
	}
}

// TestAdminTokenFileStart: a missing or too short token file stops Start
// with an error naming admin_token_file.
func TestAdminTokenFileStart(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(dir, "missing"), short} {
		cfg := app.DefaultConfig()
		cfg.Listen, cfg.Admin, cfg.Upstream.Address = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:1"
		cfg.AdminTokenFile = file
		r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
		if err == nil {
			r.Close()
			t.Fatalf("Start with admin_token_file %s succeeded", file)
		}
		if !strings.Contains(err.Error(), "admin_token_file") {
			t.Errorf("error %q does not name admin_token_file", err)
		}
	}
}
