package app_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// TestE2EClassesShareResourceBytes gives two node classes identical
// snapshots on go-control-plane: the relay holds their resources once
// (/debug/store and the xds_relay_store_* gauges count one class's bytes),
// a change in one class adds only the changed resource, and the classes'
// linger after their clients leave frees them all.
func TestE2EClassesShareResourceBytes(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	names := []string{"backend", "cache", "frontend"}
	for _, class := range []string{"class-a", "class-b"} {
		m.Set(t, class, "v1", clusters(names...))
	}
	r := startRelay(t, m.Addr, shortLinger())

	a := dialADS(t, ctx, r.Addr(), "client-a", "class-a")
	b := dialADS(t, ctx, r.Addr(), "client-b", "class-b")
	var bytesOne int64 // one class's resources, as its client received them
	for _, c := range []*adsClient{a, b} {
		if err := c.SendSotW(resource.ClusterType, nil); err != nil {
			t.Fatal(err)
		}
		resp := c.Next(10 * time.Second)
		if c == a {
			for _, res := range resp.GetResources() {
				bytesOne += int64(proto.Size(res))
			}
		}
	}
	wantStore(t, ctx, r, int64(len(names)), bytesOne)

	// class-b's frontend changes: one resource more is held.
	m.Set(t, "class-b", "v2", clusters("backend", "cache", "frontend-v2"))
	b.Next(10 * time.Second)
	if n, _ := debugStore(t, ctx, r); n != int64(len(names))+1 {
		t.Fatalf("store holds %d resources after one class's change, want %d", n, len(names)+1)
	}

	a.Close()
	b.Close()
	eventually(t, ctx, "both classes to linger out", func() bool { return len(r.Registry().Classes()) == 0 })
	wantStore(t, ctx, r, 0, 0)
}

// wantStore checks /debug/store and the gauges in /metrics.
func wantStore(t *testing.T, ctx context.Context, r *app.Relay, resources, bytes int64) {
	t.Helper()
	if n, b := debugStore(t, ctx, r); n != resources || b != bytes {
		t.Fatalf("/debug/store: %d resources, %d bytes; want %d, %d", n, b, resources, bytes)
	}
	body, _ := get(t, ctx, "http://"+r.AdminAddr()+"/metrics")
	for name, want := range map[string]int64{"xds_relay_store_resources": resources, "xds_relay_store_bytes": bytes} {
		m := regexp.MustCompile(`(?m)^` + name + `(?:\{[^}]*\})? ([0-9]+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics lacks %s", name)
		}
		if got, _ := strconv.ParseInt(string(m[1]), 10, 64); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}

func debugStore(t *testing.T, ctx context.Context, r *app.Relay) (resources, bytes int64) {
	t.Helper()
	var s struct {
		Resources int64 `json:"resources"`
		Bytes     int64 `json:"bytes"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/store", &s)
	return s.Resources, s.Bytes
}
