package bench

import (
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

// A child relay's configuration keeps the caller's keys and switches the
// per-peer limits off unless the caller set them.
func TestOneHostConfig(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.yaml")
	if err := os.WriteFile(in, []byte("limits:\n  max_collapses: 2\n  max_streams_per_peer: 7\ndrain:\n  period: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"", in} {
		out, err := oneHostConfig(file)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		_ = os.Remove(out)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Limits map[string]int    `yaml:"limits"`
			Drain  map[string]string `yaml:"drain"`
		}
		if err := yaml.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		wantStreams := -1
		if file != "" {
			wantStreams = 7
			if got.Limits["max_collapses"] != 2 || got.Drain["period"] != "1s" {
				t.Errorf("%s: the caller's keys are lost: %s", file, data)
			}
		}
		if got.Limits["max_streams_per_peer"] != wantStreams || got.Limits["streams_per_peer_per_second"] != -1 || got.Limits["new_classes_per_peer"] != -1 {
			t.Errorf("%q: got %s", file, data)
		}
	}
}
