package main

import (
	"bytes"
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
		if code := run(tc.args, &out); code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("run(%q) = %d, %q; want %d and output containing %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
}
