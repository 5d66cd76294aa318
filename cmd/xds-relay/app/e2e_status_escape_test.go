package app_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Text a terminal or a browser acts on: ESC sequences that clear the
// screen and set the window title, BEL, an 8-bit CSI, DEL and the bidi
// override that shows "evil" as "live".
const (
	hostileNode = "node-\x1b]0;owned\x07\u202eevil\u2066x\u2069\x7f\u009b"
	hostileNACK = "bad\x1b[2J\x1b[H\r\u202elive\u200f"
)

// hiddenChars are the runes of hostileNode and hostileNACK that must not
// leave the admin port raw.
var hiddenChars = []string{"\x1b", "\x07", "\r", "\x7f", "\u009b", "\u202e", "\u2066", "\u2069", "\u200f"}

// TestStatusEscapesControls: a node id and a NACK message with control and
// bidi characters are shown escaped (`\x1b`, `\u202e`) on the status page,
// and /debug/streams' JSON has them as \u escapes that decode to the
// original id.
func TestStatusEscapesControls(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a-backend"))
	r := startRelay(t, m.Addr)

	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() {
		cancel()
		_ = conn.Close()
	})
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: hostileNode, Cluster: "class-a"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: resp.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: hostileNACK}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the NACK counted", func() bool {
		for _, s := range r.Server().Streams(0) {
			for _, ts := range s.Types {
				if s.Node == hostileNode && ts.NACKs == 1 {
					return true
				}
			}
		}
		return false
	})

	base := "http://" + r.AdminAddr()
	page, _ := get(t, ctx, base+"/")
	for _, c := range hiddenChars {
		if strings.Contains(string(page), c) {
			t.Errorf("status page holds %q raw", c)
		}
	}
	for _, want := range []string{`node-\x1b]0;owned\x07\u202eevil\u2066x\u2069\x7f\u009b`, `bad\x1b[2J\x1b[H\x0d\u202elive\u200f`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("status page lacks %s", want)
		}
	}

	var streams struct {
		Streams []struct {
			Node string `json:"node"`
		} `json:"streams"`
	}
	body := getJSON(t, ctx, base+"/debug/streams", &streams)
	for _, c := range hiddenChars {
		if strings.Contains(string(body), c) {
			t.Errorf("/debug/streams holds %q raw", c)
		}
	}
	if !strings.Contains(string(body), `\u202e`) {
		t.Errorf("/debug/streams lacks the \\u202e escape:\n%s", body)
	}
	var found bool
	for _, s := range streams.Streams {
		found = found || s.Node == hostileNode
	}
	if !found {
		t.Errorf("/debug/streams: no stream decodes to node %q: %s", hostileNode, body)
	}
	if !json.Valid(body) {
		t.Errorf("/debug/streams is not JSON")
	}
}
