package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(good, []byte("listen: 127.0.0.1:18000\n"), 0o600)
	_ = os.WriteFile(bad, []byte("listen: 127.0.0.1:18000\nlimits:\n  max_resource_names: -1\n"), 0o600)
	tests := []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"validate", "--config", good}, 0, "ok"},
		{[]string{"validate", "--config", bad}, 1, "bad.yaml:3: limits.max_resource_names"},
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

// TestBinaryServesEmbeddedSampleFromAnyDirectory builds the binary, starts
// it with no flags from an empty directory, and checks that it serves the
// embedded sample: /readyz answers and /debug/upstream names the sample.
func TestBinaryServesEmbeddedSampleFromAnyDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "xds-relay")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	empty := t.TempDir()
	admin := freeAddr(t)
	cmd := exec.Command(bin, "--listen", freeAddr(t), "--admin", admin)
	cmd.Dir = empty
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("relay log:\n%s", logs.String())
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200 (last error %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get("http://" + admin + "/debug/upstream")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "embedded sample") || !strings.Contains(string(body), "clusters.yaml") {
		t.Errorf("/debug/upstream = %s; want the embedded sample and its files", body)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
