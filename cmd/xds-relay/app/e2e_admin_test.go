package app_test

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/upstream"
)

// TestE2EAdminEndpoints checks the admin endpoints of a relay serving one
// raw ADS client through go-control-plane: health and readiness answer 200,
// and every /debug/ endpoint returns JSON describing the class and the stream.
func TestE2EAdminEndpoints(t *testing.T) {
	ctx := testContext(t)
	const class, nodeID = "class-admin", "admin-client-1"
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, class, "v1", clusters("admin-cluster"))
	r := startRelay(t, m.Addr)
	base := "http://" + r.AdminAddr()

	for _, path := range []string{"/healthz", "/readyz"} {
		if body, code := get(t, ctx, base+path); code != http.StatusOK {
			t.Errorf("GET %s: status %d: %s", path, code, body)
		}
	}

	c := dialADS(t, ctx, r.Addr(), nodeID, class)
	c.Subscribe(resource.ClusterType)
	resp := c.Next(10 * time.Second)
	if got := clusterNames(t, resp); len(got) != 1 || got[0] != "admin-cluster" {
		t.Fatalf("client got clusters %v, want [admin-cluster]", got)
	}
	// The client ACKs at once; wait until the relay has counted it and the
	// upstream stream has been marked connected.
	eventually(t, ctx, "the client's ACK and a connected upstream", func() bool {
		s := r.Server().Streams(0)
		return len(s) == 1 && len(s[0].Types) == 1 && s[0].Types[0].ACKs == 1 &&
			upstreamStatus(t, ctx, r, class).State == upstream.StateConnected
	})
	streamID := r.Server().Streams(0)[0].ID

	t.Run("classes", func(t *testing.T) {
		var got []struct {
			Name          string `json:"name"`
			FirstNode     string `json:"first_node"`
			Types         int    `json:"types"`
			Subscriptions int    `json:"subscriptions"`
		}
		getJSON(t, ctx, base+"/debug/classes", &got)
		if len(got) != 1 || got[0].Name != class || got[0].FirstNode != nodeID || got[0].Types != 1 || got[0].Subscriptions != 1 {
			t.Errorf("/debug/classes = %+v, want one class %s, first node %s, 1 type, 1 subscription", got, class, nodeID)
		}
	})
	t.Run("shards", func(t *testing.T) {
		var got map[string][]struct {
			TypeURL   string `json:"type_url"`
			Received  bool   `json:"received"`
			Resources int    `json:"resources"`
			Shards    []struct {
				Wildcard bool   `json:"wildcard"`
				Version  string `json:"version"`
				Streams  int    `json:"streams"`
			} `json:"shards"`
		}
		body := getJSON(t, ctx, base+"/debug/shards", &got)
		types := got[class]
		if len(types) != 1 || types[0].TypeURL != resource.ClusterType || !types[0].Received || types[0].Resources != 1 {
			t.Fatalf("/debug/shards[%s] = %+v, want the received CDS table with 1 resource\n%s", class, types, body)
		}
		sh := types[0].Shards
		if len(sh) != 1 || !sh[0].Wildcard || sh[0].Streams != 1 || sh[0].Version != resp.GetVersionInfo() {
			t.Errorf("/debug/shards[%s] shards = %+v, want one wildcard shard at version %s with 1 stream", class, sh, resp.GetVersionInfo())
		}
	})
	t.Run("streams", func(t *testing.T) {
		var got struct {
			Count   int `json:"count"`
			Streams []struct {
				ID      uint64 `json:"id"`
				Variant string `json:"variant"`
				Node    string `json:"node"`
				Class   string `json:"class"`
				Types   []struct {
					TypeURL      string `json:"type_url"`
					Wildcard     bool   `json:"wildcard"`
					SentVersion  string `json:"sent_version"`
					AckedVersion string `json:"acked_version"`
					ACKs         int    `json:"acks"`
				} `json:"types"`
			} `json:"streams"`
		}
		body := getJSON(t, ctx, base+"/debug/streams", &got)
		if got.Count != 1 || len(got.Streams) != 1 {
			t.Fatalf("/debug/streams: count %d, %d streams; want 1\n%s", got.Count, len(got.Streams), body)
		}
		s := got.Streams[0]
		if s.ID != streamID || s.Node != nodeID || s.Class != class || s.Variant != "sotw-ads" {
			t.Errorf("/debug/streams stream = %+v, want id %d node %s class %s variant sotw-ads", s, streamID, nodeID, class)
		}
		if len(s.Types) != 1 || s.Types[0].TypeURL != resource.ClusterType || !s.Types[0].Wildcard ||
			s.Types[0].SentVersion != resp.GetVersionInfo() || s.Types[0].AckedVersion != resp.GetVersionInfo() || s.Types[0].ACKs != 1 {
			t.Errorf("/debug/streams types = %+v, want CDS wildcard sent and ACKed at %s", s.Types, resp.GetVersionInfo())
		}
		if !bytes.Contains(body, []byte(strconv.FormatUint(streamID, 10))) {
			t.Errorf("/debug/streams does not mention stream %d", streamID)
		}
		var limited struct {
			Count   int   `json:"count"`
			Streams []any `json:"streams"`
		}
		getJSON(t, ctx, base+"/debug/streams?limit=0", &limited)
		if limited.Count != 1 || len(limited.Streams) != 1 {
			t.Errorf("/debug/streams?limit=0: count %d, %d streams; want 1 and 1 (0: all)", limited.Count, len(limited.Streams))
		}
		if body, code := get(t, ctx, base+"/debug/streams?limit=x"); code != http.StatusBadRequest {
			t.Errorf("/debug/streams?limit=x: status %d, want 400: %s", code, body)
		}
	})
	t.Run("upstream", func(t *testing.T) {
		var got struct {
			Mode    string          `json:"mode"`
			Address string          `json:"address"`
			Streams []upstreamState `json:"streams"`
		}
		body := getJSON(t, ctx, base+"/debug/upstream", &got)
		if got.Mode != "ads" || got.Address != m.Addr || len(got.Streams) != 1 {
			t.Fatalf("/debug/upstream = %s, want mode ads, address %s, one stream", body, m.Addr)
		}
		s := got.Streams[0]
		if s.Class != class || s.State != upstream.StateConnected || s.ACKs != 1 || s.NACKs != 0 || s.Versions[resource.ClusterType] != "v1" {
			t.Errorf("/debug/upstream stream = %+v, want class %s connected, 1 ACK, CDS at v1", s, class)
		}
	})

	// After Close, the admin listener is gone too.
	r.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
	if resp, err := httpClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("GET /healthz after Close: status %d, want a connection error", resp.StatusCode)
	}
}
