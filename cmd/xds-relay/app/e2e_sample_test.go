package app_test

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// What `go run ./cmd/xds-relay` serves: the embedded default (the sample
// directory) to any client, no control plane involved.
func TestE2EEmbeddedDefaultServesSample(t *testing.T) {
	ctx := testContext(t)
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Source.Dir = "../../../deploy/sample-config"
	r, err := app.Start(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)

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
