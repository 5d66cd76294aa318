package relay

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
)

// A client connecting and leaving is logged at debug with its peer, node,
// class and stream kind; a stream the relay ends for a bad request is
// logged at info with its status, so an operator sees refused clients
// without turning debug on.
func TestStreamLifecycleIsLogged(t *testing.T) {
	h := newHarness(t)
	var logs logBuffer
	h.srv.log = logs.logger()

	c := h.ads(t)
	c.send(&request{Node: &corev3.Node{Id: "log-node", Cluster: "log-class"}, TypeUrl: ClusterType})
	eventually(t, "the stream to be classified", func() bool { return strings.Contains(logs.String(), "client connected") })
	c.close()
	eventually(t, "the client to leave", func() bool { return strings.Contains(logs.String(), "client left") })

	bad := h.ads(t)
	bad.send(&request{Node: &corev3.Node{Id: "bad-node", Cluster: "log-class"}})
	wantStatus(t, bad.recvError(), codes.InvalidArgument, "type_url")
	eventually(t, "the refusal to be logged", func() bool { return strings.Contains(logs.String(), "stream ended by the relay") })

	for _, line := range strings.Split(logs.String(), "\n") {
		switch {
		case strings.Contains(line, "client connected"), strings.Contains(line, "client left"):
			for _, f := range []string{`"level":"debug"`, `"peer":`, `"node":"log-node"`, `"class":"log-class"`, `"kind":"sotw-ads"`} {
				if !strings.Contains(line, f) {
					t.Errorf("log line %s lacks %s", line, f)
				}
			}
		case strings.Contains(line, "stream ended by the relay"):
			for _, f := range []string{`"level":"info"`, `"code":"InvalidArgument"`, `"reason":"invalid_request"`, "type_url"} {
				if !strings.Contains(line, f) {
					t.Errorf("log line %s lacks %s", line, f)
				}
			}
		}
	}
}
