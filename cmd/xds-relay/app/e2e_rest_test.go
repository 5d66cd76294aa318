package app_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// REST-JSON polling through the relay against a real control plane: the
// state, 304 when the client's version is current, and a long poll answered
// by a change upstream.
func TestE2ERESTPolling(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin, cfg.REST.Listen, cfg.Upstream.Address = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", m.Addr
	cfg.REST.MaxHold = 10 * time.Second
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	// poll runs in the test goroutine and in a helper goroutine: it returns
	// its errors instead of failing the test itself.
	poll := func(version string) (int, *discoveryv3.DiscoveryResponse, error) {
		body := `{"node": {"id": "rest-1", "cluster": "class-a"}, "version_info": "` + version + `"}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.RESTAddr()+"/v3/discovery:clusters", bytes.NewBufferString(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, nil, nil
		}
		var out discoveryv3.DiscoveryResponse
		if err := protojson.Unmarshal(b, &out); err != nil {
			return 0, nil, fmt.Errorf("decode %s: %w", b, err)
		}
		return resp.StatusCode, &out, nil
	}
	code, first, err := poll("")
	if err != nil || code != http.StatusOK || len(first.GetResources()) != 1 {
		t.Fatalf("first poll = %d %v %v", code, first, err)
	}
	// The long poll with the current version is answered by a change.
	got := make(chan *discoveryv3.DiscoveryResponse, 1)
	go func() {
		_, resp, err := poll(first.GetVersionInfo())
		if err != nil {
			t.Errorf("long poll: %v", err)
		}
		got <- resp
	}()
	eventually(t, ctx, "the held poll's subscription", func() bool {
		var shards map[string][]struct {
			Shards []struct {
				Streams int `json:"streams"`
			} `json:"shards"`
		}
		getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/shards", &shards)
		for _, ts := range shards["class-a"] {
			for _, s := range ts.Shards {
				if s.Streams > 0 {
					return true
				}
			}
		}
		return false
	})
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	select {
	case resp := <-got:
		if resp == nil || len(resp.GetResources()) != 2 || resp.GetVersionInfo() == first.GetVersionInfo() {
			t.Fatalf("long poll answered with %v, want the two clusters at a new version", resp)
		}
	case <-ctx.Done():
		t.Fatal("the long poll was not answered")
	}
}
