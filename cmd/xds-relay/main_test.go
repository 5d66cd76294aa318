package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(good, []byte("listen: 127.0.0.1:18000\n"), 0o600)
	_ = os.WriteFile(bad, []byte("listen: 127.0.0.1:18000\nlimits:\n  max_resource_names: -1\n"), 0o600)
	// Valid, but 0 used to mean "never" and now takes the default.
	old := filepath.Join(dir, "old.yaml")
	_ = os.WriteFile(old, []byte("limits:\n  max_collapses: 0\n"), 0o600)
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"validate", "--config", good}, 0, "ok"},
		{[]string{"validate", "--config", bad}, 1, "bad.yaml:3: limits.max_resource_names"},
		{[]string{"validate", "--config", old}, 0, "warning: " + old + ":2: limits.max_collapses: 0 takes the default (10); to never disconnect a slow client, as 0 used to, write -1"},
		{[]string{"validate"}, 2, "--config FILE is required"},
		{[]string{"--config", bad}, 1, "limits.max_resource_names"},
		{[]string{"--listen", "nowhere"}, 1, "listen"},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		if code := run(tc.args, &out, &out); code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("run(%q) = %d, %q; want %d and output containing %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
}

func TestCommandLineMistakesAreErrors(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"valdate", "--config", "x.yaml"}, 2, `unknown command "valdate"`},
		{[]string{"--listen", "127.0.0.1:0", "stray"}, 2, `unexpected argument "stray"`},
		{[]string{"validate", "--config", "x.yaml", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"version", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"validate", "--help"}, 0, "usage: xds-relay [serve] [flags]"},
		{[]string{"--help"}, 0, "usage: xds-relay [serve] [flags]"},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		if code := run(tc.args, &out, &out); code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("run(%q) = %d, %q; want %d and output containing %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"version"}, &stdout, &stderr); code != 0 {
		t.Fatalf("version exited %d: %s", code, stderr.String())
	}
	got := stdout.String()
	if !strings.HasPrefix(got, "xds-relay ") || !strings.Contains(got, "revision ") || !strings.Contains(got, "go1.") {
		t.Errorf("version printed %q; want the module version, the revision and the Go version", got)
	}
}

func TestStartErrorIsOneLine(t *testing.T) {
	var out bytes.Buffer
	code := run([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--source", filepath.Join(t.TempDir(), "missing")}, &out, &out)
	if code != 1 {
		t.Fatalf("exit %d, want 1; output %q", code, out.String())
	}
	if lines := strings.Count(strings.TrimSpace(out.String()), "\n") + 1; lines != 1 || !strings.Contains(out.String(), "missing") {
		t.Errorf("output %q; want one line naming the directory", out.String())
	}
}

func TestValidateChecksTheSourceDirectory(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "relay.yaml")
	_ = os.WriteFile(cfg, []byte("source:\n  dir: "+filepath.Join(dir, "missing")+"\n"), 0o600)
	var out bytes.Buffer
	if code := run([]string{"validate", "--config", cfg}, &out, &out); code != 1 || !strings.Contains(out.String(), "relay.yaml: source.dir:") || !strings.Contains(out.String(), "missing") {
		t.Errorf("validate of a missing source.dir: exit %d, %q; want 1 naming relay.yaml, source.dir and the path", code, out.String())
	}
}

// TestBinaryServesEmbeddedSampleFromAnyDirectory starts the binary with no
// flags but its addresses from an empty directory, and checks that it
// serves the embedded sample: /readyz answers and /debug/upstream names the
// sample.
func TestBinaryServesEmbeddedSampleFromAnyDirectory(t *testing.T) {
	admin := freeAddr(t)
	startBinary(t, t.TempDir(), "--listen", freeAddr(t), "--admin", admin)
	waitHTTP(t, "http://"+admin+"/readyz")
	code, body := httpGet(t, "http://"+admin+"/debug/upstream")
	if code != http.StatusOK || !strings.Contains(body, "embedded sample") || !strings.Contains(body, "clusters.yaml") {
		t.Errorf("/debug/upstream = %d %s; want the embedded sample and its files", code, body)
	}
}
