package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// TestE2EAdminConventions checks what an operator expects of any admin
// port: an index of the endpoints under /debug/ whose every GET path
// answers, the Go and process series in /metrics, JSON answers typed as
// such with empty lists as [], and a log level settable with a plain body.
func TestE2EAdminConventions(t *testing.T) {
	ctx := testContext(t)
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Source.Dir = "../../../deploy/sample-config"
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	r, err := app.Start(cfg, zap.NewNop(), app.WithLogLevel(level))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	base := "http://" + r.AdminAddr()

	var index []struct {
		Path    string `json:"path"`
		Methods string `json:"methods"`
	}
	getJSON(t, ctx, base+"/debug/", &index)
	paths := map[string]bool{}
	for _, e := range index {
		paths[e.Path] = true
		if !strings.Contains(e.Methods, "GET") {
			continue
		}
		resp, err := httpClient.Get(base + e.Path)
		if err != nil {
			t.Fatalf("GET %s: %v", e.Path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s (listed in /debug/): status %d", e.Path, resp.StatusCode)
		}
		if strings.HasPrefix(e.Path, "/debug/") && e.Path != "/debug/pprof/" && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("GET %s: Content-Type %q, want application/json", e.Path, resp.Header.Get("Content-Type"))
		}
	}
	for _, want := range []string{"/healthz", "/readyz", "/metrics", "/debug/classes", "/debug/logging", "/debug/pprof/"} {
		if !paths[want] {
			t.Errorf("/debug/ index lacks %s", want)
		}
	}

	if page, _ := get(t, ctx, base+"/"); !strings.Contains(string(page), `href="/debug/"`) {
		t.Error("the status page does not link the /debug/ index")
	}
	if body, _ := get(t, ctx, base+"/debug/classes"); strings.TrimSpace(string(body)) != "[]" {
		t.Errorf("/debug/classes with no class = %q, want []", body)
	}
	// A client makes a class: its state has no null lists either.
	c := dialADS(t, ctx, r.Addr(), "conventions-1", "class-a")
	c.Subscribe("type.googleapis.com/envoy.config.cluster.v3.Cluster")
	c.Next(10 * time.Second)
	for _, path := range []string{"/debug/shards", "/debug/classes", "/debug/streams", "/debug/upstream"} {
		if body, _ := get(t, ctx, base+path); strings.Contains(string(body), "null") {
			t.Errorf("%s has a null: %s", path, body)
		}
	}
	metrics, _ := get(t, ctx, base+"/metrics")
	for _, series := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if !strings.Contains(string(metrics), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}

	for _, body := range []string{"level=debug", "warn", `{"level":"error"}`} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/debug/logging", strings.NewReader(body))
		req.Header.Set("Content-Type", "text/plain")
		if strings.HasPrefix(body, "{") {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Level string `json:"level"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		want := strings.TrimPrefix(body, "level=")
		if strings.HasPrefix(body, "{") {
			want = "error"
		}
		if resp.StatusCode != http.StatusOK || got.Level != want || level.Level().String() != want {
			t.Errorf("PUT /debug/logging %q: status %d, answer %q, level %s; want %s", body, resp.StatusCode, got.Level, level.Level(), want)
		}
	}
}
