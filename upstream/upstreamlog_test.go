package upstream

import (
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/status"

	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/clientlog"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// hostileUpstream plays a control plane that misbehaves as fast as it can,
// over one protocol: bad sends a response the relay NACKs (two resources
// named name; delta: one named name, holding another), unsolicited one of a type the relay never asked for, good
// one it ACKs; reply reads the relay's answer.
type hostileUpstream struct {
	bad         func(t *testing.T, version, nonce, name string)
	unsolicited func(t *testing.T, typeURL, nonce string)
	good        func(t *testing.T, version, nonce string)
	reply       func(t *testing.T) (nonce string, detail *status.Status)
}

func sotwHostile(ss *scriptedStream) hostileUpstream {
	return hostileUpstream{
		bad: func(t *testing.T, version, nonce, name string) { respondClusters(t, ss, version, nonce, name, name) },
		unsolicited: func(t *testing.T, typeURL, nonce string) {
			ss.send(t, &discoverygrpc.DiscoveryResponse{VersionInfo: nonce, Nonce: nonce, TypeUrl: typeURL})
		},
		good: func(t *testing.T, version, nonce string) { respondClusters(t, ss, version, nonce, "a") },
		reply: func(t *testing.T) (string, *status.Status) {
			r := ss.request(t)
			return r.GetResponseNonce(), r.GetErrorDetail()
		},
	}
}

func deltaHostile(ds *deltaStream) hostileUpstream {
	return hostileUpstream{
		bad: func(t *testing.T, version, nonce, name string) {
			misnamed := cluster(t, "other", "1")
			misnamed.Name = name // twice 1 MB would pass gRPC's 4 MiB
			ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{SystemVersionInfo: version, Nonce: nonce, TypeUrl: xdstype.Cluster.URL,
				Resources: []*discoverygrpc.Resource{misnamed}})
		},
		unsolicited: func(t *testing.T, typeURL, nonce string) {
			ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{SystemVersionInfo: nonce, Nonce: nonce, TypeUrl: typeURL})
		},
		good: func(t *testing.T, version, nonce string) {
			ds.send(t, &discoverygrpc.DeltaDiscoveryResponse{SystemVersionInfo: version, Nonce: nonce, TypeUrl: xdstype.Cluster.URL,
				Resources: []*discoverygrpc.Resource{cluster(t, "a", "1")}})
		},
		reply: func(t *testing.T) (string, *status.Status) {
			r := ds.request(t)
			return r.GetResponseNonce(), r.GetErrorDetail()
		},
	}
}

// entryBytes is what one logged line holds: its message and string fields.
func entryBytes(e observer.LoggedEntry) int {
	n := len(e.Message)
	for _, f := range e.Context {
		n += len(f.Key) + len(f.String)
	}
	return n
}

// TestHostileUpstreamLogsBounded (issue 22, S8): a control plane sending a
// resource with a 1 MB name, 64 KB versions, pushes of types never asked
// for and bad versions in a tight loop. Every NACK's error_detail holds the
// reason with the name cut and its length noted; the log's warnings pass
// the upstream gate (1 a second here: at most 1 + the seconds elapsed,
// however slow the machine), each a few KiB at most, and a line after
// suppressed ones counts them; the status (/debug/upstream) is cut too.
func TestHostileUpstreamLogsBounded(t *testing.T) {
	for _, delta := range []bool{false, true} {
		t.Run(map[bool]string{false: "sotw", true: "delta"}[delta], func(t *testing.T) {
			var up hostileUpstream
			var addr string
			var next func() hostileUpstream
			if delta {
				srv, a := startScriptedDelta(t)
				addr, next = a, func() hostileUpstream { return deltaHostile(srv.next(t)) }
			} else {
				srv, a := startScripted(t)
				addr, next = a, func() hostileUpstream { return sotwHostile(srv.next(t)) }
			}
			core, logs := observer.New(zapcore.InfoLevel)
			start := time.Now()
			gate := clientlog.NewGate(1, 1024)
			c, err := New(Config{Address: addr, RelayID: "relay-under-test", Backoff: Backoff{Initial: time.Hour, Max: time.Hour},
				Delta: delta, LogGate: gate}, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			subscribe(t, attachClass(t, c, &corev3.Node{Id: "downstream-1", Cluster: "class-a"}), xdstype.Cluster.URL, shard.Subscription{Wildcard: true}, nopWatcher{})
			up = next()
			up.reply(t) // the subscription

			huge := strings.Repeat("n", 1<<20)
			longVersion := strings.Repeat("v", 64<<10)
			for i := range 3 {
				nonce := "huge-" + strconv.Itoa(i)
				up.bad(t, longVersion+strconv.Itoa(i), nonce, huge)
				got, detail := up.reply(t)
				if got != nonce || detail == nil {
					t.Fatalf("reply to %s: nonce %q, detail %v; want its NACK", nonce, got, detail)
				}
				msg := detail.GetMessage()
				if len(msg) > 1024 || !strings.Contains(msg, "nnnn") || !strings.Contains(msg, "(1048576 bytes)") {
					t.Fatalf("error_detail of %d bytes %.300q: want the reason with the name cut, its length noted, in at most 1 KiB", len(msg), msg)
				}
			}
			st := c.Status()[0]
			if len(st.LastNACK) > 4<<10 || !strings.Contains(st.LastNACK, "(1048576 bytes)") || !strings.Contains(st.LastNACK, "(65537 bytes)") {
				t.Fatalf("status last_nack of %d bytes %.300q: want the version and name cut, lengths noted", len(st.LastNACK), st.LastNACK)
			}

			for i := range 20 {
				up.unsolicited(t, "type.googleapis.com/"+strings.Repeat("x", 64<<10)+strconv.Itoa(i), "push-"+strconv.Itoa(i))
			}
			// A bad version in a tight loop, until a warning says how many
			// were suppressed: the gate refills a second after its last
			// line, whatever the machine's speed (bounded at 10 s).
			nacks := 0
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && logs.FilterFieldKey("suppressed").Len() == 0; nacks++ {
				nonce := "loop-" + strconv.Itoa(nacks)
				up.bad(t, nonce, nonce, "dup")
				if got, detail := up.reply(t); got != nonce || detail == nil {
					t.Fatalf("reply to %s: nonce %q, detail %v; want its NACK", nonce, got, detail)
				}
			}
			up.good(t, longVersion, "good")
			if got, detail := up.reply(t); got != "good" || detail != nil {
				t.Fatalf("reply to the good response: nonce %q, detail %v; want its ACK", got, detail)
			}
			elapsed := time.Since(start)

			if v := c.Status()[0].Versions[xdstype.Cluster.URL]; len(v) > 1024 || !strings.Contains(v, "(65536 bytes)") {
				t.Errorf("status version of %d bytes, want it cut to 1 KiB with its length noted", len(v))
			}
			warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
			if most := 1 + elapsed.Seconds(); float64(len(warns)) > most {
				t.Errorf("%d warnings in %v (3 huge NACKs, 20 unsolicited pushes, %d NACKs in a loop), want at most %.1f at 1 a second", len(warns), elapsed, nacks, most)
			}
			total := 0
			for _, e := range warns {
				if n := entryBytes(e); n > 4<<10 {
					t.Errorf("a warning of %d bytes (%s), want at most 4 KiB", n, e.Message)
				}
				total += entryBytes(e)
			}
			if logs.FilterFieldKey("suppressed").Len() == 0 {
				t.Errorf("no warning says how many were suppressed, after %d NACKs", nacks)
			}
			for _, e := range logs.All() {
				if n := entryBytes(e); n > 4<<10 {
					t.Errorf("a line of %d bytes (%s), want at most 4 KiB", n, e.Message)
				}
			}
			t.Logf("%d NACKs and 20 unsolicited pushes in %v: %d warnings, %d bytes", 3+nacks, elapsed, len(warns), total)
		})
	}
}
