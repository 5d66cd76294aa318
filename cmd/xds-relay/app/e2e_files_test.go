package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// What `go run ./cmd/xds-relay` serves: the embedded default (the sample
// directory) to any client, no control plane involved.
func TestE2EEmbeddedDefaultServesSample(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, "", sampleSource())

	c := dialADS(t, ctx, r.Addr(), "client-1", "class-a")
	for _, step := range []struct {
		typeURL, name string
	}{
		{"type.googleapis.com/envoy.config.listener.v3.Listener", "echo"},
		{"type.googleapis.com/envoy.config.route.v3.RouteConfiguration", "echo-route"},
		{"type.googleapis.com/envoy.config.cluster.v3.Cluster", "echo-cluster"},
		{"type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", "echo-cluster"},
	} {
		c.Subscribe(step.typeURL, step.name)
		resp := c.Next(10 * time.Second)
		if resp.GetTypeUrl() != step.typeURL || len(resp.GetResources()) != 1 {
			t.Fatalf("%s: got %v", step.typeURL, resp)
		}
		msg, err := anypb.UnmarshalNew(resp.GetResources()[0], proto.UnmarshalOptions{})
		if err != nil {
			t.Fatalf("%s: %v", step.typeURL, err)
		}
		name := msg.ProtoReflect().Descriptor().Fields().ByNumber(1)
		if got := msg.ProtoReflect().Get(name).String(); got != step.name {
			t.Fatalf("%s: resource %q, want %q", step.typeURL, got, step.name)
		}
	}
	var up struct {
		Mode   string `json:"mode"`
		Source struct {
			Files []string `json:"files"`
		} `json:"source"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &up)
	if up.Mode != "files" || !slices.Contains(up.Source.Files, "clusters.yaml") {
		t.Fatalf("/debug/upstream = %+v", up)
	}
}

// sampleFiles are the sample directory's files.
var sampleFiles = []string{"clusters.yaml", "endpoints.yaml", "listeners.yaml", "routes.yaml"}

// staleSource is a relay serving a copy of the sample directory, with a
// client (client-1) holding its clusters, once the source watches the
// directory and has reloaded it (the second load, New's being the first):
// what the test does to the files next is not seen half done.
type staleSource struct {
	dir, base string
	r         *app.Relay
	c         *adsClient
}

func startStaleSource(t *testing.T, ctx context.Context) *staleSource {
	t.Helper()
	dir := t.TempDir()
	for _, f := range sampleFiles {
		b, err := os.ReadFile(filepath.Join(sampleDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := startRelay(t, "", sourceDir(dir))
	ss := &staleSource{dir: dir, base: "http://" + r.AdminAddr(), r: r}
	ss.c = dialADS(t, ctx, r.Addr(), "client-1", "class-a")
	ss.c.Subscribe(resource.ClusterType)
	if names := clusterNames(t, ss.c.Next(10*time.Second)); len(names) != 1 || names[0] != "echo-cluster" {
		t.Fatalf("clusters %v, want [echo-cluster]", names)
	}
	eventually(t, ctx, "the source to watch its directory and reload it", func() bool {
		var st struct {
			Source struct {
				Watching bool   `json:"watching"`
				Loads    uint64 `json:"loads"`
			} `json:"source"`
		}
		getJSON(t, ctx, ss.base+"/debug/upstream", &st)
		return st.Source.Watching && st.Source.Loads >= 2
	})
	return ss
}

// remove removes files of the source directory.
func (ss *staleSource) remove(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		if err := os.Remove(filepath.Join(ss.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// expectStale checks that the relay stays ready and says on /readyz, the
// status page and /debug/upstream that the source is stale for why, and
// that a new client of the class still gets the last good cluster.
func (ss *staleSource) expectStale(t *testing.T, ctx context.Context, why string) {
	t.Helper()
	var readyBody []byte
	eventually(t, ctx, "/readyz to report the stale source", func() bool {
		var code int
		readyBody, code = get(t, ctx, ss.base+"/readyz")
		return code == http.StatusOK && strings.Contains(string(readyBody), "file source stale")
	})
	if !strings.Contains(string(readyBody), why) {
		t.Errorf("/readyz body %q should say why the source is stale (%q)", readyBody, why)
	}
	if page, code := get(t, ctx, ss.base+"/"); code != http.StatusOK || !strings.Contains(string(page), "stale: last load failed") {
		t.Errorf("status page (%d) does not show the stale source", code)
	}
	var up struct {
		Source struct {
			LastError string         `json:"last_error"`
			Resources map[string]int `json:"resources"`
		} `json:"source"`
	}
	getJSON(t, ctx, ss.base+"/debug/upstream", &up)
	if !strings.Contains(up.Source.LastError, why) || up.Source.Resources[resource.ClusterType] != 1 {
		t.Errorf("/debug/upstream source = %+v, want the refusal and the last good 1 cluster", up.Source)
	}
	c2 := dialADS(t, ctx, ss.r.Addr(), "client-2", "class-a")
	c2.Subscribe(resource.ClusterType)
	if names := clusterNames(t, c2.Next(10*time.Second)); len(names) != 1 || names[0] != "echo-cluster" {
		t.Fatalf("new client during the stale state got clusters %v, want the last good [echo-cluster]", names)
	}
}

// expectFresh waits for /readyz to stop reporting a stale source.
func (ss *staleSource) expectFresh(t *testing.T, ctx context.Context) {
	t.Helper()
	eventually(t, ctx, "/readyz to stop reporting the stale source", func() bool {
		body, code := get(t, ctx, ss.base+"/readyz")
		return code == http.StatusOK && string(body) == "ok\n"
	})
}

// TestE2EEmptiedSourceDirKeepsState: `rm` of every file of the source
// directory is refused: the client keeps its clusters (nothing is pushed),
// the relay stays ready and says on /readyz, the status page and
// /debug/upstream that the source is stale, until files with resources come
// back.
func TestE2EEmptiedSourceDirKeepsState(t *testing.T) {
	ctx := testContext(t)
	ss := startStaleSource(t, ctx)
	ss.remove(t, sampleFiles...)
	ss.expectStale(t, ctx, "no resources")

	// Files with resources come back (every type: a load without one is
	// refused too): loaded, pushed, no longer stale. The first client's
	// next response is this one: the refused state pushed nothing.
	for _, f := range sampleFiles {
		b, err := os.ReadFile(filepath.Join(sampleDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ss.dir, f), []byte(strings.ReplaceAll(string(b), "echo-cluster", "new-cluster")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if names := clusterNames(t, ss.c.Next(10*time.Second)); len(names) != 1 || names[0] != "new-cluster" {
		t.Fatalf("after the files came back the client got %v, want [new-cluster] (and nothing before it)", names)
	}
	ss.expectFresh(t, ctx)
}

// TestE2EEmptiedSourceTypeKeepsState (issue 22, S9): clusters.yaml and
// listeners.yaml removed, the other files kept, is refused like an emptied
// directory: nothing is pushed, the source is reported stale naming the
// types lost, until files declare the types empty on purpose; then the
// client is sent no clusters.
func TestE2EEmptiedSourceTypeKeepsState(t *testing.T) {
	ctx := testContext(t)
	ss := startStaleSource(t, ctx)
	ss.remove(t, "clusters.yaml", "listeners.yaml")
	ss.expectStale(t, ctx, "1 Cluster (clusters.yaml), 1 Listener (listeners.yaml)")

	for name, typeURL := range map[string]string{"no-clusters.yaml": resource.ClusterType, "no-listeners.yaml": resource.ListenerType} {
		if err := os.WriteFile(filepath.Join(ss.dir, name), []byte("type_url: "+typeURL+"\nresources: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if names := clusterNames(t, ss.c.Next(10*time.Second)); len(names) != 0 {
		t.Fatalf("after the types were declared empty the client got clusters %v, want none (and nothing before)", names)
	}
	ss.expectFresh(t, ctx)
}

// TestE2EAdminConventions checks what an operator expects of any admin
// port: an index of the endpoints under /debug/ whose every GET path
// answers, the Go and process series in /metrics, JSON answers typed as
// such with empty lists as [], and a log level settable with a plain body.
func TestE2EAdminConventions(t *testing.T) {
	ctx := testContext(t)
	level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
	r := startRelay(t, "", sampleSource(), withApp(app.WithLogLevel(level)))
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
