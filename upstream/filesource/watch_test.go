package filesource

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/xds-relay/xds-relay/shard"
)

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newRegistry(t *testing.T, start func(*shard.Class) func(string)) *shard.Registry {
	t.Helper()
	classifier, err := shard.NewClassifier(nil)
	if err != nil {
		t.Fatal(err)
	}
	return shard.NewRegistryWith(classifier, start, shard.Lifecycle{})
}

// classOf returns node's class in registry.
func classOf(t *testing.T, registry *shard.Registry, n *corev3.Node) *shard.Class {
	t.Helper()
	class, err := registry.Acquire(n)
	if err != nil {
		t.Fatal(err)
	}
	return class
}

func node(cluster string) *corev3.Node { return &corev3.Node{Id: cluster + "-1", Cluster: cluster} }

// counts is a class's resource count per type URL it has received.
func counts(c *shard.Class) map[string]int {
	out := map[string]int{}
	for _, ts := range c.Status() {
		if ts.Received {
			out[ts.TypeURL] = ts.Resources
		}
	}
	return out
}

// runSource starts a Source over dir with a class attached ("one"), and its
// Run until the test ends (startRun).
func runSource(t *testing.T, dir string) (*Source, *shard.Class) {
	t.Helper()
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	class := classOf(t, newRegistry(t, s.Attach), node("one"))
	startRun(t, s)
	return s, class
}

// expectRefused waits for a reload after before to fail with an error
// containing wantErr, then checks that neither the class nor the status
// moved from the last good state.
func expectRefused(t *testing.T, s *Source, class *shard.Class, before Status, step, wantErr string, good map[string]int) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		return s.Status().Failures > before.Failures && strings.Contains(s.Status().LastError, wantErr)
	}, "%s: LastError containing %q, have %q", step, wantErr, s.Status().LastError)
	if got := counts(class); !maps.Equal(got, good) {
		t.Errorf("%s: class has %v, want the last good %v", step, got, good)
	}
	if got := s.Status().Resources; !maps.Equal(got, good) {
		t.Errorf("%s: Status().Resources = %v, want the last good %v", step, got, good)
	}
}

// startRun runs s.Run until the test ends, then checks that it returned.
func startRun(t *testing.T, s *Source) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
		if s.Status().Watching {
			t.Error("still watching after Run returned")
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	eventually(t, 5*time.Second, func() bool { return s.Status().Watching }, "watch started")
}

func TestWatch(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{"clusters.yaml": clusterYAML("a")})
	s, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	class := classOf(t, newRegistry(t, nil), node("one"))
	s.Attach(class)
	if got, want := counts(class), map[string]int{clusterType: 1}; !maps.Equal(got, want) {
		t.Fatalf("after Attach: %v, want %v", got, want)
	}
	startRun(t, s)

	write := func(name, content string) func() error {
		return func() error { return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644) }
	}
	remove := func(name string) func() error {
		return func() error { return os.Remove(filepath.Join(dir, name)) }
	}
	// replace writes a temporary dotfile and renames it over name, as
	// editors and deploy tools do.
	replace := func(name, content string) func() error {
		return func() error {
			tmp := filepath.Join(dir, "."+name+".tmp")
			if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, filepath.Join(dir, name))
		}
	}
	steps := []struct {
		name    string
		do      func() error
		want    map[string]int
		wantErr string // substring of Status().LastError; "" for none
	}{
		{"new file", write("listeners.yaml", listenerYAML("l1", "l2")), map[string]int{clusterType: 1, listenerType: 2}, ""},
		{"edit in place", write("clusters.yaml", clusterYAML("a", "b", "c")), map[string]int{clusterType: 3, listenerType: 2}, ""},
		{"broken file keeps the last good state", write("broken.yaml", "resources: [\n"), map[string]int{clusterType: 3, listenerType: 2}, "broken.yaml"},
		{"duplicate keeps the last good state", write("broken.yaml", clusterYAML("a")), map[string]int{clusterType: 3, listenerType: 2}, `duplicate Cluster "a"`},
		{"fixed", write("broken.yaml", clusterYAML("d")), map[string]int{clusterType: 4, listenerType: 2}, ""},
		{"atomic replace", replace("clusters.yaml", clusterYAML("a")), map[string]int{clusterType: 2, listenerType: 2}, ""},
		{"removed file emptying its type keeps the last good state", remove("listeners.yaml"), map[string]int{clusterType: 2, listenerType: 2}, "2 Listener (listeners.yaml)"},
		{"type declared empty deletes its resources", write("no-listeners.yaml", emptyListenersYAML), map[string]int{clusterType: 2, listenerType: 0}, ""},
		{"ignored file", write("notes.txt", "resources: ["), map[string]int{clusterType: 2, listenerType: 0}, ""},
	}
	for _, step := range steps {
		before := s.Status()
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if step.wantErr != "" {
			// The failed reload has happened once the error shows; the
			// state must not have moved.
			expectRefused(t, s, class, before, step.name, step.wantErr, step.want)
		} else {
			eventually(t, 5*time.Second, func() bool {
				st := s.Status()
				return maps.Equal(counts(class), step.want) && maps.Equal(st.Resources, step.want) && st.LastError == ""
			}, "%s: class %v, status %v, want %v; last error %q", step.name, counts(class), s.Status().Resources, step.want, s.Status().LastError)
		}
	}
	st := s.Status()
	if want := []string{"broken.yaml", "clusters.yaml", "no-listeners.yaml"}; !slices.Equal(st.Files, want) {
		t.Errorf("files = %v, want %v", st.Files, want)
	}
	if st.Failures < 3 || !st.FailedAt.IsZero() {
		t.Errorf("status = %+v", st)
	}

	// A class attached now gets every type that has resources; the emptied
	// one is applied (empty) once a client subscribes to it, like a type no
	// file has (TestInterestReapply): a class holds no table for nothing.
	late := classOf(t, newRegistry(t, nil), node("late"))
	s.Attach(late)
	if got, want := counts(late), map[string]int{clusterType: 2}; !maps.Equal(got, want) {
		t.Errorf("late class: %v, want %v", got, want)
	}
}

// nopWatcher is a shard watcher that polls instead of listening.
type nopWatcher struct{}

func (*nopWatcher) ShardChanged(*shard.Shard, *shard.Response) {}

func (*nopWatcher) ShardHeartbeat(*shard.Shard, *shard.Heartbeat) {}

// TestInterestReapply checks that resources a class dropped (its last
// subscriber left) come back when a client subscribes again, and that a type
// no file has is served as empty.
func TestInterestReapply(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{"clusters.yaml": clusterYAML("a", "b")})
	s, class := runSource(t, dir)

	shardNames := func(sh *shard.Shard) []string {
		if r := sh.Current(); r != nil {
			return r.Names
		}
		return nil
	}
	tests := []struct {
		name    string
		typeURL string
		sub     shard.Subscription
		want    []string // nil: the shard must get an empty response
	}{
		{"wildcard", clusterType, shard.NewSubscription(nil, true), []string{"a", "b"}},
		{"wildcard again", clusterType, shard.NewSubscription(nil, true), []string{"a", "b"}},
		{"by name", clusterType, shard.NewSubscription([]string{"b"}, false), []string{"b"}},
		{"by name again", clusterType, shard.NewSubscription([]string{"a"}, false), []string{"a"}},
		{"type without files", listenerType, shard.NewSubscription([]string{"x"}, false), nil},
		{"type without files again", listenerType, shard.NewSubscription([]string{"x"}, false), nil},
	}
	for _, tc := range tests {
		w := &nopWatcher{}
		sh, err := class.TrySubscribe(tc.typeURL, tc.sub, w)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, func() bool {
			return sh.Current() != nil && slices.Equal(shardNames(sh), tc.want)
		}, "%s: shard names %v, want %v", tc.name, shardNames(sh), tc.want)
		// The last subscriber leaving must not lose the state for the next.
		class.Unsubscribe(sh, w)
	}
	// A type the source holds nothing of leaves nothing behind, in the
	// class or the source (a client asking for made-up type URLs).
	if got := class.TypeURLs(); !slices.Equal(got, []string{clusterType}) {
		t.Errorf("class tables %v, want only %s", got, clusterType)
	}
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	if s.applied[class][listenerType] {
		t.Errorf("the source remembers giving the class %s", listenerType)
	}
}

// TestDirReplaced removes the watched directory and creates it again: the
// watch follows.
func TestDirReplaced(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"clusters.yaml": clusterYAML("a")})
	s, class := runSource(t, dir)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool { return !s.Status().Watching }, "watch lost")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"clusters.yaml": clusterYAML("b", "c")})
	want := map[string]int{clusterType: 2}
	eventually(t, 5*time.Second, func() bool {
		return s.Status().Watching && maps.Equal(counts(class), want) && s.Status().LastError == ""
	}, "state of the new directory: %v, want %v", counts(class), want)
}

func TestRunTwice(t *testing.T) {
	s, err := New(sampleDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	startRun(t, s)
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("second Run: %v", err)
	}
}

func TestCloseForgetsClasses(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{"clusters.yaml": clusterYAML("a")})
	s, class := runSource(t, dir)
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	loads := s.Status().Loads
	writeFiles(t, dir, map[string]string{"clusters.yaml": clusterYAML("a", "b")})
	eventually(t, 5*time.Second, func() bool { return s.Status().Loads > loads && s.Status().Resources[clusterType] == 2 }, "reload after Close")
	if got := counts(class)[clusterType]; got != 1 {
		t.Errorf("closed source updated a class: %d clusters", got)
	}
}

// TestEmptiedDirKeepsState: a reload that finds no resource (every file
// removed, or only empty lists left, as midway through a deploy) is refused:
// the classes keep the last good state, the status says why, and the next
// load with resources is installed.
func TestEmptiedDirKeepsState(t *testing.T) {
	dir := writeFiles(t, t.TempDir(), map[string]string{
		"clusters.yaml":  clusterYAML("a", "b"),
		"listeners.yaml": listenerYAML("l1"),
	})
	s, class := runSource(t, dir)
	good := map[string]int{clusterType: 2, listenerType: 1}
	if got := counts(class); !maps.Equal(got, good) {
		t.Fatalf("after start: %v, want %v", got, good)
	}

	steps := []struct {
		name string
		do   func() error
	}{
		{"every file removed", func() error {
			for _, f := range []string{"clusters.yaml", "listeners.yaml"} {
				if err := os.Remove(filepath.Join(dir, f)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"only empty lists", func() error {
			return os.WriteFile(filepath.Join(dir, "empty.yaml"), []byte("resources: []\n"), 0o644)
		}},
	}
	for _, step := range steps {
		before := s.Status()
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		expectRefused(t, s, class, before, step.name, "no resources", good)
	}

	writeFiles(t, dir, map[string]string{"clusters.yaml": clusterYAML("c"), "listeners.yaml": listenerYAML("l2")})
	want := map[string]int{clusterType: 1, listenerType: 1}
	eventually(t, 5*time.Second, func() bool {
		return maps.Equal(counts(class), want) && s.Status().LastError == ""
	}, "a load with resources: class %v, want %v; last error %q", counts(class), want, s.Status().LastError)
}

// TestNewEmptyDir: a directory without resources is an error at start (the
// relay would serve nothing and report ready).
func TestNewEmptyDir(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no files":    {},
		"empty lists": {"clusters.yaml": "resources: []\n", "notes.txt": "x"},
	} {
		_, err := New(writeFiles(t, t.TempDir(), files), nil)
		if !errors.Is(err, ErrNoResources) {
			t.Errorf("%s: New: %v, want ErrNoResources", name, err)
		}
	}
}
