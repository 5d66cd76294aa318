package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	object := filepath.Join(dir, "relay.json")
	array := filepath.Join(dir, "sweep.json")
	bad := filepath.Join(dir, "bad.json")
	for p, content := range map[string]string{
		object: `{"target": "relay", "cache": "snapshot", "clients": 3000, "classes": 1, "clusters": 1000,
			"last_ns": 1200000000, "server_cpu_ns": 300000000, "server_rss_idle_bytes": 136314880, "latencies_ns": [60000000, 1200000000]}`,
		array: `[{"target": "limit", "clients": 3000, "classes": 1, "clusters": 1000, "last_ns": 1000000000,
			"server_cpu_ns": 250000000, "server_rss_idle_bytes": 94371840}]`,
		bad: `{"target": "relay",`,
	} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	out := filepath.Join(dir, "report")
	var stdout, stderr bytes.Buffer
	if code := runReport([]string{"--out", out, object, array}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| sotw | 3,000 | 1.20× | 1.20× |") {
		t.Errorf("merged report lacks relay ÷ limit at N=3000:\n%s", md)
	}
	for _, f := range []string{"latency-cdf.svg", "time-to-last.svg", "memory-per-stream.svg", "cpu.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}

	stderr.Reset()
	if code := runReport([]string{"--out", out, object, bad}, &stdout, &stderr); code != 1 {
		t.Errorf("malformed file: exit %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), bad) {
		t.Errorf("error does not name %s: %s", bad, stderr.String())
	}

	for _, args := range [][]string{{object}, {"--out", out}} {
		stderr.Reset()
		if code := runReport(args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage: xds-bench report") {
			t.Errorf("%v: exit %d, want 2 and the usage; stderr: %s", args, code, stderr.String())
		}
	}
	stderr.Reset()
	if code := runReport([]string{"--help"}, &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "memory-per-stream.svg") {
		t.Errorf("--help: exit %d, stderr: %s", code, stderr.String())
	}
}
