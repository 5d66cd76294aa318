package app_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// TestE2EEmptiedSourceDirKeepsState: `rm` of every file of the source
// directory is refused: the client keeps its clusters (nothing is pushed),
// the relay stays ready and says on /readyz, the status page and
// /debug/upstream that the source is stale, until files with resources come
// back.
func TestE2EEmptiedSourceDirKeepsState(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	for _, f := range []string{"clusters.yaml", "endpoints.yaml", "listeners.yaml", "routes.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../../deploy/sample-config", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin, cfg.Source.Dir = "127.0.0.1:0", "127.0.0.1:0", dir
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	base := "http://" + r.AdminAddr()

	c := dialADS(t, ctx, r.Addr(), "client-1", "class-a")
	c.Subscribe(resource.ClusterType)
	first := c.Next(10 * time.Second)
	if names := clusterNames(t, first); len(names) != 1 || names[0] != "echo-cluster" {
		t.Fatalf("clusters %v, want [echo-cluster]", names)
	}

	// The source's first reload, once it watches the directory (the second
	// load, New's being the first), must not see the files half removed.
	eventually(t, ctx, "the source to watch its directory and reload it", func() bool {
		var st struct {
			Source struct {
				Watching bool   `json:"watching"`
				Loads    uint64 `json:"loads"`
			} `json:"source"`
		}
		getJSON(t, ctx, base+"/debug/upstream", &st)
		return st.Source.Watching && st.Source.Loads >= 2
	})
	for _, f := range []string{"clusters.yaml", "endpoints.yaml", "listeners.yaml", "routes.yaml"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	var readyBody []byte
	eventually(t, ctx, "/readyz to report the stale source", func() bool {
		var code int
		readyBody, code = get(t, ctx, base+"/readyz")
		return code == http.StatusOK && strings.Contains(string(readyBody), "file source stale")
	})
	if !strings.Contains(string(readyBody), "no resources") {
		t.Errorf("/readyz body %q should say why the source is stale", readyBody)
	}
	if page, code := get(t, ctx, base+"/"); code != http.StatusOK || !strings.Contains(string(page), "stale: last load failed") {
		t.Errorf("status page (%d) does not show the stale source", code)
	}
	var up struct {
		Source struct {
			LastError string         `json:"last_error"`
			Resources map[string]int `json:"resources"`
		} `json:"source"`
	}
	getJSON(t, ctx, base+"/debug/upstream", &up)
	if !strings.Contains(up.Source.LastError, "no resources") || up.Source.Resources[resource.ClusterType] != 1 {
		t.Errorf("/debug/upstream source = %+v, want the refusal and the last good 1 cluster", up.Source)
	}
	// The class still holds the last good cluster: a new client gets it.
	c2 := dialADS(t, ctx, r.Addr(), "client-2", "class-a")
	c2.Subscribe(resource.ClusterType)
	if names := clusterNames(t, c2.Next(10*time.Second)); len(names) != 1 || names[0] != "echo-cluster" {
		t.Fatalf("new client during the stale state got clusters %v, want the last good [echo-cluster]", names)
	}

	// Files with resources come back: loaded, pushed, no longer stale. The
	// first client's next response is this one: the refused state pushed
	// nothing.
	b, err := os.ReadFile("../../../deploy/sample-config/clusters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clusters.yaml"), []byte(strings.ReplaceAll(string(b), "echo-cluster", "new-cluster")), 0o644); err != nil {
		t.Fatal(err)
	}
	if names := clusterNames(t, c.Next(10*time.Second)); len(names) != 1 || names[0] != "new-cluster" {
		t.Fatalf("after the files came back the client got %v, want [new-cluster] (and nothing before it)", names)
	}
	eventually(t, ctx, "/readyz to stop reporting the stale source", func() bool {
		body, code := get(t, ctx, base+"/readyz")
		return code == http.StatusOK && string(body) == "ok\n"
	})
}
