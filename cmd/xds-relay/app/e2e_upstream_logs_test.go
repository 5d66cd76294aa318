package app_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// TestE2EHostileUpstreamBounded (issue 22, S8): a hand-made control plane
// sends a response NACKed for a 1 MB name, then bad versions in a tight
// loop. The relay's NACK carries the reason with the name cut and its
// length noted, /debug/upstream shows the last NACK cut, and the warnings
// pass log.upstream_lines_per_second (1 here: at most 1 + the seconds
// elapsed), the next one let through counting those suppressed.
func TestE2EHostileUpstreamBounded(t *testing.T) {
	ctx := testContext(t)
	h, addr := startHandADS(t)
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Upstream.Address, cfg.Upstream.RelayID = addr, relayID
	cfg.Log.UpstreamLinesPerSecond = 1
	core, logs := observer.New(zap.InfoLevel)
	start := time.Now()
	r, err := app.Start(cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

	c := dialADS(t, ctx, r.Addr(), "client-1", "class-hostile")
	c.Subscribe(resource.ClusterType)
	up := h.stream(t, ctx)
	h.request(t, ctx)
	// bad sends a response with two Clusters named name, and returns the
	// relay's NACK's message.
	bad := func(nonce, name string) string {
		t.Helper()
		dup := xdstest.MustAny(t, &clusterv3.Cluster{Name: name})
		if err := up.Send(&discoveryv3.DiscoveryResponse{VersionInfo: nonce, Nonce: nonce, TypeUrl: resource.ClusterType, Resources: []*anypb.Any{dup, dup}}); err != nil {
			t.Fatal(err)
		}
		req := h.request(t, ctx)
		if req.GetResponseNonce() != nonce || req.GetErrorDetail() == nil {
			t.Fatalf("answer to %s: %v, want its NACK", nonce, req)
		}
		return req.GetErrorDetail().GetMessage()
	}

	msg := bad("huge", strings.Repeat("n", 1<<20))
	if len(msg) > 1024 || !strings.Contains(msg, `duplicate resource name "nnnn`) || !strings.Contains(msg, "(1048576 bytes)") {
		t.Fatalf("error_detail of %d bytes %.300q: want the reason with the name cut, its length noted", len(msg), msg)
	}
	var st struct {
		Streams []struct {
			LastNACK string `json:"last_nack"`
		} `json:"streams"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &st)
	if len(st.Streams) != 1 || len(st.Streams[0].LastNACK) > 4<<10 || !strings.Contains(st.Streams[0].LastNACK, "(1048576 bytes)") {
		t.Fatalf("/debug/upstream streams %.300v: want one, its last_nack cut with the length noted", st.Streams)
	}

	// Until a warning says how many were suppressed: the gate refills a
	// second after its last line, whatever the machine's speed (bounded).
	nacks := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && logs.FilterFieldKey("suppressed").Len() == 0; nacks++ {
		bad("loop-"+strconv.Itoa(nacks), "dup")
	}
	elapsed := time.Since(start)
	warns := logs.FilterMessage("rejected upstream response").FilterLevelExact(zapcore.WarnLevel)
	if most := 1 + elapsed.Seconds(); float64(warns.Len()) > most {
		t.Errorf("%d NACK warnings in %v for %d NACKs, want at most %.1f at 1 a second", warns.Len(), elapsed, 1+nacks, most)
	}
	if logs.FilterFieldKey("suppressed").Len() == 0 {
		t.Errorf("no warning says how many were suppressed, after %d NACKs", 1+nacks)
	}
	for _, e := range warns.All() {
		if n := len(e.ContextMap()["reason"].(string)); n > 1024 {
			t.Errorf("a NACK warning's reason of %d bytes, want at most 1 KiB", n)
		}
	}
}
