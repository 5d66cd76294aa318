package bench

import (
	"bufio"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// encodeState's delta diff holds exactly the clusters that changed.
func TestEncodeStateDiff(t *testing.T) {
	v1, err := encodeState(20, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := encodeState(20, 3, v1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body wire.Body
		want int
	}{{"v1 diff", v1.deltaDiff, 20}, {"v2 full", v2.deltaFull, 20}, {"v2 diff", v2.deltaDiff, 1}} {
		resp, err := wire.ParseDeltaResponse(tc.body.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := len(resp.Resources); got != tc.want {
			t.Errorf("%s: %d resources, want %d", tc.name, got, tc.want)
		}
	}
	s1, err := wire.ParseResponse(v1.sotw.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	s2, err := wire.ParseResponse(v2.sotw.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(s2.Resources) != 20 || s1.VersionInfo == s2.VersionInfo {
		t.Errorf("SotW v2: %d resources, versions %q and %q: want 20 and a new version", len(s2.Resources), s1.VersionInfo, s2.VersionInfo)
	}
}

// A delta stream that has not sent the previous diff yet gets every
// resource, not only the newest diff; a SotW stream gets the latest state.
func TestBroadcasterSupersedes(t *testing.T) {
	v1, _ := encodeState(5, -1, nil)
	v2, _ := encodeState(5, 0, v1)
	v3, _ := encodeState(5, 1, v2)
	b := newBroadcaster()
	b.publish(-1, v1)
	sotw, delta := b.subscribe(false, 0), b.subscribe(true, 0)
	if got := <-delta.next; string(got.Bytes()) != string(v1.deltaFull.Bytes()) {
		t.Fatal("a new delta stream is not given the full state")
	}
	b.publish(-1, v2)
	b.publish(-1, v3) // delta's v2 diff is unsent: superseded by v3's full state
	if got := <-delta.next; string(got.Bytes()) != string(v3.deltaFull.Bytes()) {
		t.Error("an unsent delta diff was replaced by a diff, losing a change")
	}
	if got := <-sotw.next; string(got.Bytes()) != string(v3.sotw.Bytes()) {
		t.Error("the SotW stream's slot does not hold the latest state")
	}
	if n := b.subscribed(); n != 2 {
		t.Errorf("subscribed = %d, want 2", n)
	}
}

// The child protocol, in process: the server announces its address, answers
// commands, reports errors as replies, and ends when its input closes.
func TestServeProtocol(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Serve([]string{ServeLimit, "--clusters", "3"}, inR, outW)
		outW.Close()
	}()
	lines := bufio.NewScanner(outR)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("no line: %v", lines.Err())
		}
		return lines.Text()
	}
	if got := next(); !strings.HasPrefix(got, "listening 127.0.0.1:") {
		t.Fatalf("first line %q, want listening 127.0.0.1:PORT", got)
	}
	for _, tc := range []struct{ command, want string }{
		{"set v1 -1", "ok *"},
		{"counts", "counts 0 0"},
		{"eds 0 7", "ok *"},
		{"prepare v2 1", "ok"},
		{"set v2 1", "ok *"},
		{"sent 0 " + ClusterType + " v2", "ok 0 0"},
		{"sent x " + ClusterType + " v2", `error strconv.Atoi: parsing "x": invalid syntax`},
		{"eds 0 x", `error strconv.Atoi: parsing "x": invalid syntax`},
		{"set v2 x", `error strconv.Atoi: parsing "x": invalid syntax`},
		{"reload", `error unknown command "reload"`},
	} {
		if _, err := io.WriteString(inW, tc.command+"\n"); err != nil {
			t.Fatal(err)
		}
		got := next()
		if prefix, ok := strings.CutSuffix(tc.want, "*"); ok && strings.HasPrefix(got, prefix) {
			if _, err := strconv.ParseInt(strings.TrimPrefix(got, prefix), 10, 64); err != nil {
				t.Errorf("%s: reply %q, want an instant in ns", tc.command, got)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s: reply %q, want %q", tc.command, got, tc.want)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Errorf("Serve after its input closed: %v", err)
	}
}
