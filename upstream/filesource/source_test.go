package filesource

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/xds-relay/xds-relay/shard/wire"
)

func TestMain(m *testing.M) {
	// Only the rewatch pace is shortened; no test relies on the others.
	rewatchEvery = 20 * time.Millisecond
	goleak.VerifyTestMain(m)
}

const (
	sampleDir    = "../../deploy/sample-config"
	listenerType = resourcev3.ListenerType
	clusterType  = resourcev3.ClusterType
	routeType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	endpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// writeFiles creates dir's files (name -> content) and returns dir.
func writeFiles(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func clusterYAML(names ...string) string {
	var b strings.Builder
	b.WriteString("resources:\n")
	for _, n := range names {
		b.WriteString("- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: " + n + "\n  connect_timeout: 1s\n")
	}
	return b.String()
}

func listenerYAML(names ...string) string {
	var b strings.Builder
	b.WriteString("resources:\n")
	for _, n := range names {
		b.WriteString("- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n  name: " + n + "\n")
	}
	return b.String()
}

func names(ts *typeState) []string {
	var out []string
	for _, r := range ts.resources {
		out = append(out, r.Name)
	}
	return out
}

func TestLoadSample(t *testing.T) {
	snap, err := loadDir(sampleDir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		listenerType: {"echo"},
		routeType:    {"echo-route"},
		clusterType:  {"echo-cluster"},
		endpointType: {"echo-cluster"},
	}
	if len(snap.types) != len(want) {
		t.Errorf("types = %d, want %d", len(snap.types), len(want))
	}
	for typeURL, wantNames := range want {
		ts := snap.types[typeURL]
		if ts == nil {
			t.Errorf("type %s missing", typeURL)
			continue
		}
		if got := names(ts); !slices.Equal(got, wantNames) {
			t.Errorf("%s names = %v, want %v", typeURL, got, wantNames)
		}
		for _, r := range ts.resources {
			// The stored Any is a canonical Any of the type, named as stored.
			typ, value, err := wire.ParseAny(r.Any)
			if err != nil || typ != typeURL {
				t.Errorf("%s %s: Any type %q, err %v", typeURL, r.Name, typ, err)
			}
			if name, err := wire.ResourceName(value); err != nil || name != r.Name {
				t.Errorf("%s %s: wire name %q, err %v", typeURL, r.Name, name, err)
			}
		}
	}
	if want := []string{"clusters.yaml", "endpoints.yaml", "listeners.yaml", "routes.yaml"}; !slices.Equal(snap.files, want) {
		t.Errorf("files = %v, want %v", snap.files, want)
	}

	again, err := loadDir(sampleDir)
	if err != nil {
		t.Fatal(err)
	}
	for typeURL, ts := range snap.types {
		other := again.types[typeURL]
		if other == nil || other.sum != ts.sum {
			t.Errorf("%s: set hash differs between loads", typeURL)
			continue
		}
		for i, r := range ts.resources {
			if o := other.resources[i]; o.Hash != r.Hash || string(o.Any) != string(r.Any) {
				t.Errorf("%s %s: bytes differ between loads", typeURL, r.Name)
			}
		}
	}
}

// TestDeterministic loads resources with map fields (marshaled in random
// order unless deterministic) many times, and the same resource written as
// YAML, JSON and with a non-canonical type URL prefix.
func TestDeterministic(t *testing.T) {
	var meta strings.Builder
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		meta.WriteString("      " + k + ": {x: 1, y: two, z: [true, null]}\n")
	}
	yamlDir := writeFiles(t, t.TempDir(), map[string]string{"c.yaml": `resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: c
  connect_timeout: 0.250s
  metadata:
    filter_metadata:
` + meta.String()})
	first, err := loadDir(yamlDir)
	if err != nil {
		t.Fatal(err)
	}
	want := first.types[clusterType].resources[0]
	for range 20 {
		snap, err := loadDir(yamlDir)
		if err != nil {
			t.Fatal(err)
		}
		if got := snap.types[clusterType].resources[0]; got.Hash != want.Hash {
			t.Fatalf("hash %x, first load %x", got.Hash, want.Hash)
		}
	}

	tests := []struct {
		name, file, content string
	}{
		{"yaml", "c.yaml", "resources:\n- {\"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster, name: c, connectTimeout: 2s}\n"},
		{"json", "c.json", `{"resources": [{"@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster", "name": "c", "connect_timeout": "2s"}]}`},
		{"other prefix", "c.json", `{"resources": [{"@type": "example.com/envoy.config.cluster.v3.Cluster", "name": "c", "connectTimeout": "2.000s"}]}`},
	}
	var hashes []uint64
	for _, tc := range tests {
		snap, err := loadDir(writeFiles(t, t.TempDir(), map[string]string{tc.file: tc.content}))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ts := snap.types[clusterType]
		if ts == nil || len(ts.resources) != 1 {
			t.Fatalf("%s: types %v", tc.name, snap.types)
		}
		hashes = append(hashes, ts.resources[0].Hash)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(hashes)))) != 1 {
		t.Errorf("hashes differ across formats: %x", hashes)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string // substrings of the error
	}{
		{
			name:  "malformed yaml",
			files: map[string]string{"good.yaml": clusterYAML("a"), "bad.yaml": "resources:\n- name: [unclosed\n  other: x\n"},
			want:  []string{"bad.yaml", "line"},
		},
		{
			name:  "malformed json",
			files: map[string]string{"bad.json": "{\n  \"resources\": [\n    {\"@type\": \"type.googleapis.com/envoy.config.cluster.v3.Cluster\", \"name\": }\n  ]\n}\n"},
			want:  []string{"bad.json", "line 3:"},
		},
		{
			name:  "json unknown field",
			files: map[string]string{"field.json": "{\"resources\": [],\n \"nope\": 1}"},
			want:  []string{"field.json: line 2:", `unknown field "nope"`},
		},
		{
			name:  "unknown type",
			files: map[string]string{"unknown.yaml": "resources:\n- \"@type\": type.googleapis.com/example.Unknown\n  name: x\n"},
			want:  []string{"unknown.yaml", "resources[0] (line 2)", "example.Unknown"},
		},
		{
			name: "unknown nested type",
			files: map[string]string{"nested.yaml": listenerYAML("ok") + `- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: l
  api_listener:
    api_listener:
      "@type": type.googleapis.com/example.Filter
`},
			want: []string{"nested.yaml", "resources[1] (line 4)", "example.Filter"},
		},
		{
			name:  "unknown field",
			files: map[string]string{"field.yaml": clusterYAML("a") + "  no_such_field: 1\n"},
			// The line of the key at fault, not the resource's first line.
			want: []string{"field.yaml", "resources[0] (line 5)", "no_such_field"},
		},
		{
			name:  "bad enum value",
			files: map[string]string{"enum.yaml": clusterYAML("a") + "  lb_policy: ROUND_ROBN\n"},
			want:  []string{"enum.yaml", "resources[0] (line 5)", "ROUND_ROBN"},
		},
		{
			name:  "duplicate across files",
			files: map[string]string{"one.yaml": clusterYAML("a", "dup"), "two.yaml": clusterYAML("dup")},
			want:  []string{"one.yaml", "two.yaml", `"dup"`},
		},
		{
			name:  "duplicate in a file",
			files: map[string]string{"one.yaml": clusterYAML("dup", "dup")},
			want:  []string{"one.yaml", "resources[0]", "resources[1]", `"dup"`},
		},
		{
			name:  "no name",
			files: map[string]string{"noname.yaml": "resources:\n- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n  stat_prefix: x\n"},
			want:  []string{"noname.yaml", "name"},
		},
		{
			name:  "invalid resource",
			files: map[string]string{"invalid.yaml": "resources:\n- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: c\n  connect_timeout: -1s\n"},
			want:  []string{"invalid.yaml", "invalid Cluster", "ConnectTimeout"},
		},
		{
			name: "invalid nested resource",
			files: map[string]string{"nested.yaml": `resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: l
  api_listener:
    api_listener:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      rds: {route_config_name: r, config_source: {ads: {}}}
`},
			want: []string{"nested.yaml", "resources[0] (line 2)", "invalid Listener", "api_listener", "StatPrefix"},
		},
		{
			name:  "type_url mismatch",
			files: map[string]string{"mixed.yaml": "type_url: type.googleapis.com/envoy.config.listener.v3.Listener\n" + clusterYAML("a")},
			want:  []string{"mixed.yaml", "type_url"},
		},
		{
			name:  "unknown top-level field",
			files: map[string]string{"top.yaml": "defaults: {}\n" + clusterYAML("a")},
			want:  []string{"top.yaml", "defaults"},
		},
		{
			name:  "empty file",
			files: map[string]string{"empty.yaml": "# nothing yet\n"},
			want:  []string{"empty.yaml", "empty"},
		},
		{
			name:  "empty json",
			files: map[string]string{"empty.json": "\n"},
			want:  []string{"empty.json", "empty"},
		},
		{
			name:  "two documents",
			files: map[string]string{"two.yaml": clusterYAML("a") + "---\n" + clusterYAML("b")},
			want:  []string{"two.yaml", "line 5", "document"},
		},
		{
			name:  "not a mapping",
			files: map[string]string{"list.yml": "- a\n- b\n"},
			want:  []string{"list.yml", "mapping"},
		},
		{
			name:  "duplicate key",
			files: map[string]string{"keys.yaml": clusterYAML("a") + "  name: b\n"},
			want:  []string{"keys.yaml", "line 5", "already defined"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, t.TempDir(), tc.files)
			_, err := loadDir(dir)
			if err == nil {
				t.Fatal("load succeeded")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if _, err := New(dir, nil); err == nil {
				t.Error("New succeeded")
			}
		})
	}
}

func TestLoadIgnores(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{
		"clusters.yaml":  clusterYAML("a"),
		"more.YML":       clusterYAML("b"),
		".hidden.yaml":   "not: [valid",
		"notes.txt":      "not: [valid",
		"clusters.yaml~": "not: [valid",
		"README.md":      "# hi",
	})
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, filepath.Join(dir, "sub.yaml"), map[string]string{"x.yaml": "not: [valid"})
	// Symlinked files are followed (ConfigMap volumes).
	if err := os.Symlink(filepath.Join(dir, "more.YML"), filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	snap, err := loadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "link.yaml") || !strings.Contains(err.Error(), "more.YML") {
		t.Fatalf("a symlink duplicating more.YML: err %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if snap, err = loadDir(dir); err != nil {
		t.Fatal(err)
	}
	if got := names(snap.types[clusterType]); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("names = %v", got)
	}
	if want := []string{"clusters.yaml", "more.YML"}; !slices.Equal(snap.files, want) {
		t.Errorf("files = %v, want %v", snap.files, want)
	}
}

func TestNewMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if _, err := New(dir, nil); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("err = %v", err)
	}
	if _, err := New("", nil); err == nil {
		t.Error("empty dir accepted")
	}
}

// TestYAMLValues covers YAML features the JSON conversion must keep:
// anchors, aliases and merge keys, timestamps-looking strings, non-finite
// floats, integer keys, binary.
func TestYAMLValues(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{"c.yaml": `version_info: v1
resources:
- &base
  "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: c1
  connect_timeout: 3s
  lb_policy: RING_HASH
  metadata:
    filter_metadata:
      m: {inf: .inf, when: 2001-12-14, 1: one}
- <<: *base
  name: c2
  lb_policy: RANDOM
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: l
  listener_filters:
  - name: f
    typed_config:
      "@type": type.googleapis.com/envoy.config.core.v3.DataSource
      inline_bytes: !!binary |
        aGVs
        bG8=
`})
	snap, err := loadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, r := range snap.types[clusterType].resources {
		var a anypb.Any
		if err := proto.Unmarshal(r.Any, &a); err != nil {
			t.Fatal(err)
		}
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		clusters[r.Name] = c
	}
	c1, c2 := clusters["c1"], clusters["c2"]
	if c1 == nil || c2 == nil {
		t.Fatalf("clusters = %v", clusters)
	}
	if c2.GetConnectTimeout().AsDuration() != 3*time.Second || c2.GetLbPolicy() != clusterv3.Cluster_RANDOM || c1.GetLbPolicy() != clusterv3.Cluster_RING_HASH {
		t.Errorf("merge key: c2 = %v %v", c2.GetConnectTimeout(), c2.GetLbPolicy())
	}
	m := c1.GetMetadata().GetFilterMetadata()["m"].GetFields()
	if m["when"].GetStringValue() != "2001-12-14" || m["1"].GetStringValue() != "one" || m["inf"].GetStringValue() != "Infinity" {
		t.Errorf("metadata = %v", m)
	}
	l := snap.types[listenerType].resources[0]
	if !strings.Contains(string(l.Any), "hello") {
		t.Errorf("binary value not decoded: %q", l.Any)
	}
}

func TestStatusJSON(t *testing.T) {
	s, err := New(sampleDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Status()
	if st.Dir != filepath.Clean(sampleDir) || st.Loads != 1 || st.LastError != "" || st.LoadedAt.IsZero() {
		t.Errorf("status = %+v", st)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"dir", "watching", "files", "loaded_at", "loads", "failures", "resources"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status JSON lacks %q: %s", k, b)
		}
	}
	for _, k := range []string{"last_error", "failed_at"} {
		if _, ok := m[k]; ok {
			t.Errorf("status JSON has %q without an error: %s", k, b)
		}
	}
	if got := m["resources"].(map[string]any)[listenerType]; got != 1.0 {
		t.Errorf("listener count = %v", got)
	}
	// The caller's copy is its own.
	st.Resources[listenerType] = 42
	st.Files[0] = "x"
	if again := s.Status(); again.Resources[listenerType] != 1 || again.Files[0] == "x" {
		t.Error("Status shares its maps with the caller")
	}
}

// loadDir loads a directory as New does.
func loadDir(dir string) (*snapshot, error) { return load(os.DirFS(dir), dir) }
