package app

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfigValid(t *testing.T) {
	cfg, err := ParseConfig("relay.yaml", []byte(`
listen: 127.0.0.1:18001
upstream:
  address: cp.example:15010
  backoff:
    initial: 1s
    max: 1m
node_classes:
  rules:
  - field: metadata.role
    regex: ^gw-(.*)$
    class: gw-$1
log:
  level: debug
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:18001" || cfg.Upstream.Backoff.Max != time.Minute || cfg.Admin != "127.0.0.1:19000" || len(cfg.NodeClasses.Rules) != 1 {
		t.Fatalf("cfg = %+v", cfg)
	}
}

// Every bad file names the key and its line.
func TestParseConfigErrorsNameKeyAndLine(t *testing.T) {
	tests := []struct {
		name, yaml string
		wantKey    string
		wantLine   int
	}{
		{"unknown key", "listen: :1\nupstream:\n  adress: x:1\n", "upstream.adress", 3},
		{"wrong type", "limits:\n  max_resource_names: lots\n", "limits.max_resource_names", 2},
		{"bad duration", "upstream:\n  backoff:\n    initial: soon\n", "upstream.backoff.initial", 3},
		{"invalid address", "admin: nowhere\n", "admin", 1},
		{"backoff order", "upstream:\n  backoff:\n    initial: 2s\n    max: 1s\n", "upstream.backoff.max", 4},
		{"bad rule regex", "node_classes:\n  rules:\n  - field: id\n    regex: \"(\"\n", "node_classes.rules[0].regex", 4},
		{"bad rule field", "node_classes:\n  rules:\n  - field: idd\n", "node_classes.rules[0].field", 3},
		{"bad log level", "log:\n  level: loud\n", "log.level", 2},
		{"plaintext rest with client certificates", "tls:\n  cert_file: c\n  key_file: k\n  client_ca_file: ca\nrest:\n  listen: 127.0.0.1:1\n  plaintext: true\n", "rest.plaintext", 7},
		{"bad identity regex", "tls:\n  cert_file: c\n  key_file: k\n  client_ca_file: ca\nidentity:\n  rules:\n  - san: \"(\"\n    node_id: y\n", "identity.rules[0].san", 7},
		{"rule class without regex", "node_classes:\n  rules:\n  - field: id\n    class: gw-$1\n", "node_classes.rules[0].class", 4},
		{"second identity rule without node_id", "tls:\n  cert_file: c\n  key_file: k\n  client_ca_file: ca\nidentity:\n  rules:\n  - {san: a, node_id: b}\n  - san: x\n", "identity.rules[1].node_id", 8},
		{"bad protocol", "upstream:\n  address: cp:1\n  protocol: grpc\n", "upstream.protocol", 3},
		{"stream window under HTTP/2's least", "upstream:\n  address: cp:1\n  stream_window: 1000\n", "upstream.stream_window", 3},
		{"connection window over HTTP/2's most", "upstream:\n  address: cp:1\n  connection_window: 4294967296\n", "upstream.connection_window", 3},
		{"max message under 64 KiB", "upstream:\n  address: cp:1\n  max_message_bytes: 1024\n", "upstream.max_message_bytes", 3},
		{"no upstream connections", "upstream:\n  address: cp:1\n  max_connections: -1\n", "upstream.max_connections", 3},
		{"bad ask", "upstream:\n  address: cp:1\n  ask: everything\n", "upstream.ask", 3},
		{"bad wildcard", "upstream:\n  address: cp:1\n  wildcard: some\n", "upstream.wildcard", 3},
		{"site-specific wildcard asked alone", "upstream:\n  address: cp:1\n  ask: wildcard\n  wildcard: site_specific\n", "upstream.wildcard", 4},
		{"negative linger", "node_classes:\n  linger: -1s\n", "node_classes.linger", 2},
		{"negative max classes", "limits:\n  max_classes: -1\n", "limits.max_classes", 2},
		{"fallback under its old name", "upstream:\n  address: cp:1\n  addresses: [cp2:1, nowhere]\n", "upstream.addresses[1]", 3},
		{"fallbacks under both names", "upstream:\n  address: cp:1\n  fallbacks: [cp2:1]\n  addresses: [cp3:1]\n", "upstream.addresses", 4},
		// Flow style: several keys share a line; the error names the one at fault.
		{"flow: unknown key last", "upstream: {address: x, protocl: sotw}\n", "upstream.protocl", 1},
		{"flow: unknown key first", "upstream: {protocl: sotw, address: x}\n", "upstream.protocl", 1},
		{"flow: unknown key between", "upstream: {address: x, protocl: sotw, relay_id: r}\n", "upstream.protocl", 1},
		{"flow: nested unknown key", "upstream: {backoff: {initail: 1s, max: 2s}, address: x}\n", "upstream.backoff.initail", 1},
		{"flow: bad value among others", "limits: {max_streams: 5, max_resource_names: lots, request_burst: 3}\n", "limits.max_resource_names", 1},
		{"flow: long bad value", "upstream: {address: x, backoff: {initial: soonish_later, max: 2s}}\n", "upstream.backoff.initial", 1},
		{"flow: sequence of maps", "node_classes: {rules: [{field: id, regex: a}, {field: id, regx: b}]}\n", "node_classes.rules[1].regx", 1},
		{"flow: sequence then unknown key", "upstream: {fallbacks: [a:1, b:1], adress: x}\n", "upstream.adress", 1},
		{"flow: same name in two maps", "upstream: {tls: {ca_file: a, relay_id: r}, relay_id: r}\n", "upstream.tls.relay_id", 1},
		{"block then flow line", "listen: :1\nupstream:\n  address: x:1\n  backoff: {max: 2s, initial: lots}\n", "upstream.backoff.initial", 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("relay.yaml", []byte(tc.yaml))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if ce.Key != tc.wantKey || ce.Line != tc.wantLine {
				t.Fatalf("err = %q (key %q line %d), want key %q line %d", err, ce.Key, ce.Line, tc.wantKey, tc.wantLine)
			}
			if !strings.HasPrefix(err.Error(), "relay.yaml:") || !strings.Contains(err.Error(), tc.wantKey) {
				t.Fatalf("message %q must name the file and key", err)
			}
		})
	}
}

// REST follows the xDS listener's TLS: with client certificates and identity
// rules it is served over mTLS with the rules applied, so the combination is
// valid; only an explicit rest.plaintext beside tls.client_ca_file is not.
func TestParseConfigRESTWithMTLS(t *testing.T) {
	for _, y := range []string{
		"tls: {cert_file: c, key_file: k, client_ca_file: ca}\nrest: {listen: 127.0.0.1:1}\n",
		"tls: {cert_file: c, key_file: k, client_ca_file: ca}\nidentity: {rules: [{san: x, node_id: y}]}\nrest: {listen: 127.0.0.1:1}\n",
		"tls: {cert_file: c, key_file: k}\nrest: {listen: 127.0.0.1:1, plaintext: true}\n",
	} {
		if _, err := ParseConfig("relay.yaml", []byte(y)); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
}

func TestParseConfigSyntaxError(t *testing.T) {
	_, err := ParseConfig("relay.yaml", []byte("listen: [\n"))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Line == 0 {
		t.Fatalf("err = %v, want a ConfigError with a line", err)
	}
}

func TestLoadConfigFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(p, []byte("listen: 127.0.0.1:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(p + ".missing"); err == nil {
		t.Fatal("missing file loaded")
	}
}

// validate reports every problem at once, each with its line and key, in
// file order; a value of the wrong type says what was expected.
func TestParseConfigReportsEveryError(t *testing.T) {
	data := "listen: 127.0.0.1:18000\ndrain:\n  period: 30\nlog:\n  level: loud\nupstream:\n  address: x:1\n  protocl: sotw\nlimits:\n  max_resource_names: -1\n"
	_, err := ParseConfig("relay.yaml", []byte(data))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		"relay.yaml:3: drain.period: want a duration such as 30s, got 30",
		"relay.yaml:5: log.level: must be debug, info, warn or error",
		"relay.yaml:8: upstream.protocl: unknown key",
		"relay.yaml:10: limits.max_resource_names: must be at least 1",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "drain.period" {
		t.Errorf("errors.As finds %+v, want the first problem (drain.period)", ce)
	}
}

func TestConfigErrorWithoutFile(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Upstream.Address, cfg.Upstream.Protocol = "x:1", "foo"
	err := cfg.Validate()
	if err == nil || strings.HasPrefix(err.Error(), ":") || !strings.HasPrefix(err.Error(), "upstream.protocol: ") {
		t.Errorf("Validate() = %q; want it to start with the key, no stray colon", err)
	}
}
