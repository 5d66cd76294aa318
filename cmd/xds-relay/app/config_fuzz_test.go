package app

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzParseConfig parses arbitrary bytes as the configuration file:
//
//   - ParseConfig never panics;
//   - an error is a *ConfigError for the file, and its message starts with
//     the file name (and the line, when it has one);
//   - a configuration accepted passes Validate, holds no NaN (which every
//     range check lets through), and written back as YAML parses to the same
//     configuration.
func FuzzParseConfig(f *testing.F) {
	seeds := []string{
		"",
		"listen: 127.0.0.1:18001\nupstream:\n  address: cp.example:15010\n  backoff:\n    initial: 1s\n    max: 1m\n" +
			"node_classes:\n  rules:\n  - field: metadata.role\n    regex: ^gw-(.*)$\n    class: gw-$1\nlog:\n  level: debug\n",
		`listen: ":18000"
admin: ":19000"
upstream:
  address: istiod.istio-system.svc:15010
  fallbacks: [cp2:15010, "[::1]:15010"]
  protocol: delta
  relay_id: relay-1
  tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, server_name: cp}
  backoff: {initial: 500ms, max: 30s}
source: {dir: deploy/sample-config}
node_classes:
  rules:
  - field: metadata.role
    regex: '^gateway-(\w+)$'
    class: 'gw-$1'
  - field: cluster
log: {level: info, format: json}
limits: {max_types_per_stream: 64, max_resource_names: 100000, max_streams: 10, max_streams_per_connection: 5,
  max_message_bytes: 65536, requests_per_second: 2.5, request_burst: 3, max_collapses: 0}
drain: {period: 30s, max_connection_age: 30m, max_connection_age_grace: 1m}
rest: {listen: ":18080", max_hold: 10s}
tracing: {otlp_endpoint: "otel:4317", sample_ratio: 0.25}
tls: {cert_file: s.pem, key_file: s.key, client_ca_file: ca.pem}
identity:
  rules:
  - {san: '^spiffe://example/ns/(\w+)/sa/envoy$', node_id: '^$1-.*$', class: '$1'}
`,
		// The error cases of config_test.go.
		"listen: :1\nupstream:\n  adress: x:1\n",
		"limits:\n  max_resource_names: lots\n",
		"upstream:\n  backoff:\n    initial: soon\n",
		"admin: nowhere\n",
		"upstream:\n  backoff:\n    initial: 2s\n    max: 1s\n",
		"node_classes:\n  rules:\n  - field: id\n    regex: \"(\"\n",
		"node_classes:\n  rules:\n  - field: idd\n",
		"log:\n  level: loud\n",
		"upstream:\n  address: cp:1\n  protocol: grpc\n",
		"listen: [\n",
		// YAML oddities.
		"---\nlisten: :1\n---\nlisten: :2\n",
		"a: &x {listen: :1}\nb: *x\n",
		"<<: {listen: ':1'}\n",
		"listen: !!binary OjE=\n",
		"limits: {requests_per_second: .inf}\n",
		"node_classes: {rules: [{field: id, class: $1}]}\n",
		"node_classes:\n  rules:\n  - field: id\n    regex: \"a\\nb(\"\n",
		"upstream: {address: 'h:99999'}\n",
		"drain: {period: -1s}\n",
		"upstream: {address: a:1, addresses: [b:1]}\n",
		"\t\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return // the parser is linear; long inputs only slow the fuzzer
		}
		const file = "fuzz/relay.yaml"
		cfg, err := ParseConfig(file, data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *ConfigError", err, err)
			}
			prefix := file + ": "
			if ce.Line > 0 {
				prefix = fmt.Sprintf("%s:%d: ", file, ce.Line)
			}
			if ce.File != file || !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("error %q (file %q, line %d) does not start with %q", err, ce.File, ce.Line, prefix)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted a configuration Validate rejects: %v", err)
		}
		for key, v := range map[string]float64{
			"tracing.sample_ratio":       cfg.Tracing.SampleRatio,
			"limits.requests_per_second": cfg.Limits.RequestsPerSecond,
		} {
			if math.IsNaN(v) {
				t.Fatalf("%s: NaN accepted", key)
			}
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("accepted configuration does not marshal: %v", err)
		}
		again, err := ParseConfig("round-trip.yaml", out)
		if err != nil {
			t.Fatalf("accepted configuration, written back, fails: %v\n%s", err, out)
		}
		if out2, _ := yaml.Marshal(again); string(out2) != string(out) {
			t.Fatalf("configuration changed in a round trip:\n%s\nbecame\n%s", out, out2)
		}
	})
}
