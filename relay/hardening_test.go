package relay

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// rawCodec sends and receives message bytes as they are, so a test can put
// anything on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// rawStream opens method on the harness's connection and sends msg, then
// returns the status the stream ends with.
func (h *harness) rawStream(t *testing.T, method string, msg []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), recvTimeout)
	defer cancel()
	st, err := h.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		if err := st.RecvMsg(&out); err != nil {
			return err
		}
	}
}

// A request that does not decode — garbage, or a string field (node id,
// resource name) that is not UTF-8, which proto3 forbids — ends its stream
// with INVALID_ARGUMENT counted as invalid_request, not gRPC's INTERNAL.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	str := func(b []byte, field protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(b, field, protowire.BytesType), s)
	}
	node := str(nil, 1, "bad-\xff-id") // Node.id
	badNode := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), node)
	badName := str(str(nil, 4, ClusterType), 3, "name-\xc3") // type_url, resource_names
	garbage := []byte{0xff, 0xff, 0xff, 0xff, 0x0f}
	const (
		ads   = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
		delta = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
		cds   = "/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters"
	)
	for _, tc := range []struct {
		name, method string
		msg          []byte
		want         string
	}{
		{"garbage ADS", ads, garbage, "not a valid DiscoveryRequest"},
		{"garbage delta", delta, garbage, "not a valid DeltaDiscoveryRequest"},
		{"garbage CDS", cds, garbage, "not a valid DiscoveryRequest"},
		{"node id not UTF-8", ads, badNode, "invalid UTF-8"},
		{"node id not UTF-8, delta", delta, badNode, "invalid UTF-8"}, // node is field 2 of both
		{"resource name not UTF-8", ads, badName, "invalid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			reasons := &reasonRecorder{}
			h.srv.metrics = reasons
			wantStatus(t, h.rawStream(t, tc.method, tc.msg), codes.InvalidArgument, tc.want)
			eventually(t, "the stream to be counted", func() bool { return len(reasons.get()) == 1 })
			if got := reasons.get(); got[0] != ReasonInvalidRequest {
				t.Fatalf("disconnect reason %q, want %q", got[0], ReasonInvalidRequest)
			}
		})
	}
}

// A stream that sends no request within limits.first_request_timeout is
// ended and frees its slot of limits.max_streams: idle streams cannot lock
// real clients out. A stream that asked for something is not ended.
func TestFirstRequestTimeout(t *testing.T) {
	h := newHarness(t)
	h.srv.opts.MaxStreams = 3
	h.srv.opts.FirstRequestTimeout = 200 * time.Millisecond
	reasons := &reasonRecorder{}
	h.srv.metrics = reasons
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 1))
	active := h.ads(t)
	active.subscribe(ClusterType)
	active.nextOf(ClusterType)
	idle := []*client{h.ads(t), h.ads(t)} // the limit, with the active one
	for _, c := range idle {
		wantStatus(t, c.recvError(), codes.DeadlineExceeded, "limits.first_request_timeout")
	}
	eventually(t, "the idle streams to be released", func() bool { return h.srv.StreamCount() == 1 })
	late := h.ads(t)
	late.subscribe(ClusterType)
	late.nextOf(ClusterType)
	active.fence() // still served, well past its own timeout
	if got := reasons.get(); len(got) != 2 || got[0] != ReasonLimit || got[1] != ReasonLimit {
		t.Fatalf("disconnect reasons %v, want two %q", got, ReasonLimit)
	}
}

// Inputs out of bounds end the stream with INVALID_ARGUMENT naming the
// limit, before anything is stored: no class is created for them.
func TestInputBounds(t *testing.T) {
	meta, err := structpb.NewStruct(map[string]any{"blob": strings.Repeat("m", 70<<10)})
	if err != nil {
		t.Fatal(err)
	}
	ok := &corev3.Node{Id: "n", Cluster: "c"}
	for _, tc := range []struct {
		name string
		req  *request
		want string
	}{
		{"long type URL", &request{Node: ok, TypeUrl: "type.googleapis.com/" + strings.Repeat("a", 300)}, "limits.max_type_url_bytes"},
		{"type URL without a slash", &request{Node: ok, TypeUrl: "envoy.config.cluster.v3.Cluster"}, "is not a type URL"},
		{"type URL with a space", &request{Node: ok, TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Clu ster"}, "is not a type URL"},
		{"type URL with a control character", &request{Node: ok, TypeUrl: "type.googleapis.com/\x01a.B"}, "is not a type URL"},
		{"type URL naming no message", &request{Node: ok, TypeUrl: "type.googleapis.com/envoy..Cluster"}, "is not a type URL"},
		{"type URL ending in a dot", &request{Node: ok, TypeUrl: "type.googleapis.com/"}, "is not a type URL"},
		{"long resource name", &request{Node: ok, TypeUrl: ClusterType, ResourceNames: []string{"a", strings.Repeat("n", 3000)}}, "resource_names[1]: 3000 bytes exceed limits.max_resource_name_bytes (2048)"},
		{"large node", &request{Node: &corev3.Node{Id: "n", Cluster: "c", Metadata: meta}, TypeUrl: ClusterType}, "limits.max_node_bytes (65536)"},
		{"long node id", &request{Node: &corev3.Node{Id: strings.Repeat("i", 2000), Cluster: "c"}, TypeUrl: ClusterType}, "node.id: 2000 bytes exceed limits.max_node_id_bytes (1024)"},
		{"long class name", &request{Node: &corev3.Node{Id: "n", Cluster: strings.Repeat("c", 10<<10)}, TypeUrl: ClusterType}, "limits.max_class_name_bytes (256)"},
		{"long version_info", &request{Node: ok, TypeUrl: ClusterType, VersionInfo: strings.Repeat("v", 1<<20)}, "version_info: a version of 1048576 bytes exceeds limits.max_version_bytes (1024)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			before, _ := h.registry.Counts()
			c := h.ads(t)
			c.send(tc.req)
			err := c.recvError()
			wantStatus(t, err, codes.InvalidArgument, tc.want)
			if len(err.Error()) > 512 {
				t.Fatalf("status message of %d bytes: it must not echo the input", len(err.Error()))
			}
			if after, _ := h.registry.Counts(); after != before {
				t.Fatalf("classes %d → %d: a refused node made a class", before, after)
			}
		})
	}
	// Per-type services check their fixed type; a long mismatch is not echoed.
	h := newHarness(t)
	c := h.perType(t, ClusterType)
	c.send(&request{Node: ok, TypeUrl: strings.Repeat("x", 1<<20)})
	err = c.recvError()
	wantStatus(t, err, codes.InvalidArgument, "type_url:")
	if len(err.Error()) > 512 {
		t.Fatalf("status message of %d bytes: it must not echo the input", len(err.Error()))
	}
}

// logBuffer is a JSON logger writing into a buffer, to measure log bytes.
type logBuffer struct{ xdstest.SyncBuffer }

func (b *logBuffer) logger() *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), b, zap.DebugLevel))
}

// A delta client's initial_resource_versions are bounded like the names it
// subscribes (their keys) and like a SotW version_info (their values): the
// relay keeps them per stream.
func TestDeltaInitialVersionsBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initial map[string]string
		want    string
	}{
		{"long version", map[string]string{"a": strings.Repeat("v", 1<<20)}, "initial_resource_versions: a version of 1048576 bytes exceeds limits.max_version_bytes (1024)"},
		{"long name", map[string]string{strings.Repeat("n", 3000): "v1"}, "initial_resource_versions[0]: 3000 bytes exceed limits.max_resource_name_bytes (2048)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			c := h.deltaADS(t)
			c.send(&deltaRequest{Node: h.node, TypeUrl: ClusterType, ResourceNamesSubscribe: []string{"a"}, InitialResourceVersions: tc.initial})
			err := c.recvError()
			wantStatus(t, err, codes.InvalidArgument, tc.want)
			if len(err.Error()) > 512 {
				t.Fatalf("status message of %d bytes: it must not echo the input", len(err.Error()))
			}
		})
	}
}

// NACKs carrying megabytes of error message (naming huge resources) cost a
// bounded number of log bytes each: the fields a client fills are cut, with
// their length noted; the message kept for /debug/streams is cut too.
func TestNACKLogBytesBounded(t *testing.T) {
	h := newHarness(t)
	var logs logBuffer
	h.srv.log = logs.logger()
	const nacks, msgBytes = 10, 1 << 20
	c := h.ads(t)
	c.node = &corev3.Node{Id: strings.Repeat("i", 1000), Cluster: h.node.Cluster}
	h.apply(ClusterType, true, resource(t, ClusterType, "A", 0))
	c.subscribe(ClusterType)
	for v := 1; v <= nacks; v++ {
		resp := c.nextOf(ClusterType)
		c.nack(resp, "", "rejected "+strings.Repeat("n", msgBytes))
		c.fence() // the NACK is handled before the next version is pushed
		h.apply(ClusterType, true, resource(t, ClusterType, "A", v))
	}
	c.nextOf(ClusterType)
	c.fence()
	out := logs.String()
	lines := strings.Count(out, "client rejected a response")
	if lines != nacks {
		t.Fatalf("%d NACK lines logged, want %d", lines, nacks)
	}
	if !strings.Contains(out, "(1048585 bytes)") {
		t.Fatalf("the cut NACK message does not note its length: %.300s", out)
	}
	if per := len(out) / nacks; per > 4<<10 {
		t.Fatalf("%d log bytes per NACK of %d bytes, want at most 4 KiB", per, msgBytes)
	}
	if got := h.typeStatus(t, ClusterType).LastNACK; len(got) > 1024 {
		t.Fatalf("last NACK kept with %d bytes, want at most 1024", len(got))
	}
	t.Logf("%d NACKs of %d bytes: %d log bytes", nacks, msgBytes, len(out))
}

// Clients with huge cluster names (the default class) are refused before
// any class, label or log line holds the name.
func TestHugeClusterNameLogsBounded(t *testing.T) {
	h := newHarness(t)
	var logs logBuffer
	h.srv.log = logs.logger()
	before, _ := h.registry.Counts()
	for i := range 10 {
		c := h.ads(t)
		c.send(&request{Node: &corev3.Node{Id: "n", Cluster: strings.Repeat(string(rune('a'+i)), 1<<20)}, TypeUrl: ClusterType})
		wantStatus(t, c.recvError(), codes.InvalidArgument, "limits.max_node_bytes")
	}
	eventually(t, "the streams to end", func() bool { return h.srv.StreamCount() == 0 })
	if after, _ := h.registry.Counts(); after != before {
		t.Fatalf("classes %d → %d", before, after)
	}
	if n := len(logs.String()); n > 10*1024 {
		t.Fatalf("%d log bytes for 10 refused clients", n)
	}
}

// REST polls get the same input bounds (400 naming the limit), and a
// refused node makes no class.
func TestRESTInputBounds(t *testing.T) {
	h := newHarness(t)
	ts := restServer(t, h, 0)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"long node id", `{"node":{"id":"` + strings.Repeat("i", 2000) + `","cluster":"c2"}}`, "limits.max_node_id_bytes"},
		{"long class name", `{"node":{"id":"n","cluster":"` + strings.Repeat("c", 1000) + `"}}`, "limits.max_class_name_bytes"},
		{"large node", `{"node":{"id":"n","cluster":"c3","metadata":{"m":"` + strings.Repeat("m", 70<<10) + `"}}}`, "limits.max_node_bytes"},
		{"long name", `{"node":{"id":"n","cluster":"c4"},"resource_names":["` + strings.Repeat("x", 3000) + `"]}`, "limits.max_resource_name_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := do(context.Background(), ts, "POST", "/v3/discovery:clusters", []byte(tc.body))
			if res.err != nil {
				t.Fatal(res.err)
			}
			wantError(t, res, 400, tc.want)
		})
	}
	if got := len(h.registry.Classes()); got != 1 {
		t.Fatalf("%d classes, want only the harness's", got)
	}
}
