package filesource

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// emptyListenersYAML declares the Listener type empty on purpose.
const emptyListenersYAML = "type_url: type.googleapis.com/envoy.config.listener.v3.Listener\nresources: []\n"

const endpointsYAML = "resources:\n- \"@type\": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment\n  cluster_name: a\n"

// TestReloadEmptyingTypeKeepsState (issue 22, S9): clusters.yaml and
// listeners.yaml removed, endpoints kept, is refused whole, like a load
// without any resource: the class keeps every type of the last good state,
// the status names each type lost and its files, and says how to mean it.
// A file declaring a type empty (its type_url, no resources) lets it go; a
// type already empty blocks nothing.
func TestReloadEmptyingTypeKeepsState(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{
		"clusters.yaml":  clusterYAML("a", "b"),
		"listeners.yaml": listenerYAML("l1"),
		"endpoints.yaml": endpointsYAML,
	})
	s, class := runSource(t, dir)
	good := map[string]int{clusterType: 2, listenerType: 1, endpointType: 1}
	if got := counts(class); !maps.Equal(got, good) {
		t.Fatalf("after start: %v, want %v", got, good)
	}
	remove := func(names ...string) {
		t.Helper()
		for _, n := range names {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	refused := func(step string, want []string, notWant string) {
		t.Helper()
		eventually(t, 5*time.Second, func() bool {
			e := s.Status().LastError
			for _, w := range want {
				if !strings.Contains(e, w) {
					return false
				}
			}
			return notWant == "" || !strings.Contains(e, notWant)
		}, "%s: LastError %q, want it to name %q", step, s.Status().LastError, want)
		if got := counts(class); !maps.Equal(got, good) {
			t.Errorf("%s: class has %v, want the last good %v", step, got, good)
		}
		if got := s.Status().Resources; !maps.Equal(got, good) {
			t.Errorf("%s: Status().Resources = %v, want the last good %v", step, got, good)
		}
	}

	remove("clusters.yaml", "listeners.yaml")
	refused("clusters and listeners removed", []string{"types emptied", "2 Cluster (clusters.yaml)", "1 Listener (listeners.yaml)", "type_url: type.googleapis.com/envoy.config.cluster.v3.Cluster"}, "")

	writeFiles(t, dir, map[string]string{"no-clusters.yaml": "type_url: type.googleapis.com/envoy.config.cluster.v3.Cluster\nresources: []\n"})
	refused("clusters declared empty, listeners not", []string{"types emptied", "1 Listener (listeners.yaml)"}, "Cluster (")

	// JSON declares it as well, with any type URL prefix.
	writeFiles(t, dir, map[string]string{"no-listeners.json": `{"type_url": "example.com/envoy.config.listener.v3.Listener", "resources": []}`})
	want := map[string]int{clusterType: 0, listenerType: 0, endpointType: 1}
	eventually(t, 5*time.Second, func() bool {
		return maps.Equal(counts(class), want) && maps.Equal(s.Status().Resources, want) && s.Status().LastError == ""
	}, "both declared empty: class %v, status %v, want %v; last error %q", counts(class), s.Status().Resources, want, s.Status().LastError)

	loads := s.Status().Loads
	remove("no-clusters.yaml", "no-listeners.json")
	eventually(t, 5*time.Second, func() bool {
		st := s.Status()
		return st.Loads > loads && len(st.Files) == 1 && st.LastError == ""
	}, "declarations of types already empty removed: status %+v, want a good load of endpoints.yaml", s.Status())
	if got := counts(class); !maps.Equal(got, want) {
		t.Errorf("after the declarations went: class %v, want %v", got, want)
	}
}

// The refusal's error wraps ErrTypesEmptied (and not ErrNoResources: the
// load had resources), for callers telling the cases apart, and names at
// most maxNamedFiles files per type.
func TestTypesEmptiedError(t *testing.T) {
	files := map[string]string{"clusters.yaml": clusterYAML("a")}
	for i := range 7 {
		files["l"+strconv.Itoa(i)+".yaml"] = listenerYAML("l" + strconv.Itoa(i))
	}
	dir := writeFiles(t, t.TempDir(), files)
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		if err := os.Remove(filepath.Join(dir, "l"+strconv.Itoa(i)+".yaml")); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := loadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = s.checkKeepsTypes(snap)
	if !errors.Is(err, ErrTypesEmptied) || errors.Is(err, ErrNoResources) {
		t.Fatalf("checkKeepsTypes = %v, want ErrTypesEmptied only", err)
	}
	if want := "7 Listener (l0.yaml, l1.yaml, l2.yaml, l3.yaml, l4.yaml and 2 more)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("checkKeepsTypes = %v, want it to name %q", err, want)
	}
}
