package bench

import (
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

// oneHostLimits are the relay keys a load generator on one host switches
// off: its thousands of clients dial from a handful of loopback addresses,
// so to the relay they are a few peers, each far past a real node's share
// (limits.*_per_peer, the per-peer stream rate). -1 is off.
var oneHostLimits = []string{"max_streams_per_peer", "max_connections_per_peer", "new_classes_per_peer", "streams_per_peer_per_second"}

// oneHostConfig writes the relay configuration of file ("" for none) with
// oneHostLimits off, unless the file sets them, to a temporary file it
// returns; the caller removes it.
func oneHostConfig(file string) (string, error) {
	cfg := map[string]any{}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			return "", fmt.Errorf("%s: %w", file, err)
		}
		if cfg == nil {
			cfg = map[string]any{}
		}
	}
	limits, ok := cfg["limits"].(map[string]any)
	if !ok {
		limits = map[string]any{}
		cfg["limits"] = limits
	}
	for _, k := range oneHostLimits {
		if _, set := limits[k]; !set {
			limits[k] = -1
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "xds-relay-bench-*.yaml")
	if err != nil {
		return "", err
	}
	if _, err := f.Write(out); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), f.Close()
}
