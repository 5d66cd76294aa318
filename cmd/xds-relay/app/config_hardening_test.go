package app

import (
	"errors"
	"testing"
	"time"
)

// The transport and input limits are config keys with defaults; a bad
// value names its key and line.
func TestHardeningKeys(t *testing.T) {
	cfg, err := ParseConfig("relay.yaml", []byte(`
limits:
  first_request_timeout: 5s
  max_type_url_bytes: 200
  max_node_bytes: 32768
  max_metric_classes: 10
server:
  connection_timeout: 3s
  max_header_list_bytes: 16384
log:
  client_lines_per_second: 5
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.FirstRequestTimeout != 5*time.Second || cfg.Limits.MaxTypeURLBytes != 200 || cfg.Limits.MaxNodeBytes != 32768 ||
		cfg.Limits.MaxMetricClasses != 10 || cfg.Server.ConnectionTimeout != 3*time.Second || cfg.Server.MaxHeaderListBytes != 16384 ||
		cfg.Log.ClientLinesPerSecond != 5 || cfg.Server.KeepaliveMinTime != 15*time.Second || cfg.Limits.MaxResourceNameBytes != 2048 {
		t.Fatalf("cfg = %+v", cfg)
	}
	for _, tc := range []struct{ yaml, key string }{
		{"limits:\n  first_request_timeout: -1s\n", "limits.first_request_timeout"},
		{"limits:\n  max_node_id_bytes: -1\n", "limits.max_node_id_bytes"},
		{"limits:\n  max_metric_classes: -1\n", "limits.max_metric_classes"},
		{"server:\n  connection_timeout: -1s\n", "server.connection_timeout"},
		{"server:\n  max_header_list_bytes: 100\n", "server.max_header_list_bytes"},
		{"server:\n  keepalive_min_time: -5s\n", "server.keepalive_min_time"},
		{"log:\n  max_field_bytes: 10\n", "log.max_field_bytes"},
	} {
		_, err := ParseConfig("relay.yaml", []byte(tc.yaml))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tc.key || ce.Line != 2 {
			t.Errorf("%q: err = %v, want one naming %s at line 2", tc.yaml, err, tc.key)
		}
	}
}
