package app_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// /metrics in the Prometheus text format: the relay's counters and gauges
// move with what clients and the upstream do, and no node id is a label.
func TestE2EMetrics(t *testing.T) {
	ctx := testContext(t)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	r := startRelay(t, m.Addr)
	c := dialADS(t, ctx, r.Addr(), "secret-node-id-1234", "class-a")
	c.Subscribe(cdsType)
	c.Next(10 * time.Second)
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	c.Next(10 * time.Second)

	url := "http://" + r.AdminAddr() + "/metrics"
	value := func(text, series string) float64 {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	var text string
	// The client's ACKs are counted by the relay's reader, concurrently with
	// the pushes the client already received: wait for them too.
	eventually(t, ctx, "the update's fan-out and the client's ACKs to be observed", func() bool {
		body, _ := get(t, ctx, url)
		text = string(body)
		return value(text, `xds_relay_fanout_duration_seconds_count{type="Cluster"}`) >= 1 &&
			value(text, `xds_relay_client_acks_total{class="class-a",type="Cluster"}`) >= 1
	})
	for series, min := range map[string]float64{
		`xds_relay_downstream_streams{variant="sotw-ads"}`:                                1,
		`xds_relay_downstream_subscriptions{type="Cluster",variant="sotw-ads"}`:           1,
		`xds_relay_pushes_total{type="Cluster",variant="sotw-ads"}`:                       2,
		`xds_relay_client_acks_total{class="class-a",type="Cluster"}`:                     1,
		`xds_relay_upstream_responses_total{class="class-a",result="ack",type="Cluster"}`: 2,
		`xds_relay_upstream_connected{class="class-a"}`:                                   1,
		`xds_relay_node_classes`: 1,
		`xds_relay_shards`:       1,
	} {
		if v := value(text, series); v < min {
			t.Errorf("%s = %v, want ≥ %v", series, v, min)
		}
	}
	if v := value(text, `xds_relay_push_bytes_total{type="Cluster",variant="sotw-ads"}`); v <= 0 {
		t.Errorf("push bytes = %v", v)
	}
	if strings.Contains(text, "secret-node-id-1234") {
		t.Error("a node id appears in /metrics: labels must stay bounded")
	}
}
