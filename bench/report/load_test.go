package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadObjectAndArray(t *testing.T) {
	dir := t.TempDir()
	one, err := json.MarshalIndent(run("relay", "snapshot", false, 1000, 50*time.Millisecond, 273*time.Millisecond, 110*time.Millisecond, 63*mib), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	// An array as the sweep writes it, with fields this bench does not know
	// and the optional ones.
	array := `[
  {"target": "relay", "cache": "snapshot", "clients": 3000, "classes": 1, "clusters": 1000, "delta": true,
   "last_ns": 96000000, "server_rss_idle_bytes": 81788928, "server_rss_base_bytes": 28311552,
   "streams_per_conn": 10, "service": "cds", "bytes_total": 705000, "some_future_field": {"x": 1}},
  {"target": "limit", "clients": 3000, "last_ns": 90000000}
]`
	runs, err := Load(writeFile(t, dir, "one.json", string(one)), writeFile(t, dir, "sweep.json", array))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 1 + 2", len(runs))
	}
	if r := runs[0]; r.Target != "relay" || r.Clients != 1000 || r.Last != 273*time.Millisecond || len(r.Latencies) != 1000 || r.ServerRSSBase != 0 {
		t.Errorf("object: %+v", r)
	}
	r := runs[1]
	if !r.Delta || r.Clients != 3000 || r.Last != 96*time.Millisecond || r.ServerRSSIdle != 81788928 {
		t.Errorf("array[0] known fields: %+v", r)
	}
	if r.ServerRSSBase != 28311552 || r.StreamsPerConn != 10 || r.Service != "cds" || r.BytesTotal != 705000 {
		t.Errorf("array[0] optional fields: base %d, streams/conn %d, service %q, bytes %d", r.ServerRSSBase, r.StreamsPerConn, r.Service, r.BytesTotal)
	}
	if runs[2].Target != "limit" {
		t.Errorf("array[1]: %+v", runs[2])
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.json", `{"target": "relay", "clients": 10}`)
	for _, tc := range []struct{ name, content, want string }{
		{"truncated.json", `[{"target": "relay", "clients": 10},`, "decoding an array"},
		{"garbage.json", `target=relay`, "decoding a result"},
		{"empty.json", "  \n", "empty file"},
		{"wrong-type.json", `{"target": "relay", "clients": "many"}`, "decoding a result"},
		{"not-a-result.json", `{"name": "something else"}`, "not a fan-out result"},
	} {
		bad := writeFile(t, dir, tc.name, tc.content)
		_, err := Load(good, bad)
		if err == nil {
			t.Errorf("%s: loaded", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not name the file and %q", tc.name, err, tc.want)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}
