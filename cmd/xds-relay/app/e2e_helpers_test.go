package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// eventually polls cond until it holds, failing the test if ctx ends first.
func eventually(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if !poll(ctx, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// poll checks cond every 10ms until it holds (true) or ctx ends (false).
func poll(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// getJSON fetches an admin endpoint and decodes its JSON body into v; it
// returns the raw body.
func getJSON(t *testing.T, ctx context.Context, url string, v any) []byte {
	t.Helper()
	body, code := get(t, ctx, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: not JSON: %v\n%s", url, err, body)
	}
	return body
}

// httpClient keeps no idle connections, so no goroutine outlives a request.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func get(t *testing.T, ctx context.Context, url string) ([]byte, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return body, resp.StatusCode
}

// upstreamState is one entry of /debug/upstream's streams.
type upstreamState struct {
	Class      string `json:"class"`
	State      string `json:"state"`
	LastError  string `json:"last_error"`
	Reconnects int    `json:"reconnects"`
	// ConnectionFailures, Failures, UnavailableSince: issue 27 (F2, F3).
	ConnectionFailures int               `json:"connection_failures"`
	Failures           int               `json:"failures"`
	UnavailableSince   *string           `json:"unavailable_since"`
	ACKs               int               `json:"acks"`
	NACKs              int               `json:"nacks"`
	LastNACK           string            `json:"last_nack"`
	Versions           map[string]string `json:"versions"`
	Restarts           struct {
		Wildcard     int `json:"wildcard"`
		Claim        int `json:"claim"`
		NamesIgnored int `json:"names_ignored"`
	} `json:"restarts"`
}

// scrape reads one series of the relay's /metrics; ok is false when it is
// not there.
func scrape(t *testing.T, ctx context.Context, r *app.Relay, series string) (v float64, ok bool) {
	t.Helper()
	body, _ := get(t, ctx, "http://"+r.AdminAddr()+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`).FindSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, err == nil
}

// upstreamStatus reads /debug/upstream and returns the class's stream.
func upstreamStatus(t *testing.T, ctx context.Context, r *app.Relay, class string) upstreamState {
	t.Helper()
	var out struct {
		Mode    string          `json:"mode"`
		Streams []upstreamState `json:"streams"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &out)
	for _, s := range out.Streams {
		if s.Class == class {
			return s
		}
	}
	return upstreamState{}
}

// clusterNames decodes a CDS response: the sorted cluster names. Every
// resource must be an Any of the response's type.
func clusterNames(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	if resp.GetTypeUrl() != resource.ClusterType {
		t.Fatalf("response type %q, want %q", resp.GetTypeUrl(), resource.ClusterType)
	}
	var names []string
	for i, a := range resp.GetResources() {
		if a.GetTypeUrl() != resp.GetTypeUrl() {
			t.Fatalf("resources[%d]: type %q in a %q response", i, a.GetTypeUrl(), resp.GetTypeUrl())
		}
		var c clusterv3.Cluster
		if err := anypb.UnmarshalTo(a, &c, proto.UnmarshalOptions{}); err != nil {
			t.Fatalf("resources[%d]: %v", i, err)
		}
		names = append(names, c.GetName())
	}
	slices.Sort(names)
	return names
}

// deltaResNames returns the sorted names of a delta response's resources.
func deltaResNames(resp *discoveryv3.DeltaDiscoveryResponse) []string {
	out := make([]string, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		out = append(out, r.GetName())
	}
	slices.Sort(out)
	return out
}

// wantDeltaResp checks a delta response of typeURL carries exactly names
// and removes exactly removed.
func wantDeltaResp(t *testing.T, resp *discoveryv3.DeltaDiscoveryResponse, typeURL string, names, removed []string) {
	t.Helper()
	gotRemoved := slices.Sorted(slices.Values(resp.GetRemovedResources()))
	if resp.GetTypeUrl() != typeURL || !slices.Equal(deltaResNames(resp), names) || !slices.Equal(gotRemoved, removed) {
		t.Fatalf("delta %s response has %v removed %v, want %s %v removed %v",
			resp.GetTypeUrl(), deltaResNames(resp), gotRemoved, typeURL, names, removed)
	}
}

// connectTimeouts decodes a SotW CDS response: name -> connect timeout (s).
func connectTimeouts(t *testing.T, resp *discoveryv3.DiscoveryResponse) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, a := range resp.GetResources() {
		var c clusterv3.Cluster
		if err := a.UnmarshalTo(&c); err != nil {
			t.Fatal(err)
		}
		out[c.GetName()] = c.GetConnectTimeout().GetSeconds()
	}
	return out
}

// oneUpstreamStream checks the relay's /debug/upstream lists exactly one
// stream, for class, connected, never restarted.
func oneUpstreamStream(t *testing.T, ctx context.Context, r *app.Relay, class string) {
	t.Helper()
	var out struct {
		Protocol string          `json:"protocol"`
		Streams  []upstreamState `json:"streams"`
	}
	getJSON(t, ctx, "http://"+r.AdminAddr()+"/debug/upstream", &out)
	if len(out.Streams) != 1 || out.Streams[0].Class != class || out.Streams[0].State != "connected" || out.Streams[0].Reconnects != 0 {
		t.Fatalf("relay %s (%s upstream): /debug/upstream streams %+v, want one connected stream of %s without reconnects",
			r.Addr(), out.Protocol, out.Streams, class)
	}
}
