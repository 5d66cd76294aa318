package app

import (
	"errors"
	"strings"
	"testing"
)

// server.max_connections defaults to the fd limit less server.reserved_fds;
// a set value wins; negative or an unlimited fd limit is no cap; a limit
// the reserve leaves nothing of is an error naming the key.
func TestMaxConnectionsFromFDLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		max, resv   int
		nofile      uint64
		want        int
		errContains string
	}{
		{name: "default", resv: 256, nofile: 20000, want: 19744},
		{name: "set", max: 500, resv: 256, nofile: 20000, want: 500},
		{name: "off", max: -1, resv: 256, nofile: 20000, want: 0},
		{name: "unlimited", resv: 256, nofile: ^uint64(0), want: 0},
		{name: "nothing left", resv: 256, nofile: 256, errContains: "server.reserved_fds"},
	} {
		got, err := maxConnections(ServerConfig{MaxConnections: tc.max, ReservedFDs: tc.resv}, tc.nofile)
		if tc.errContains != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errContains) {
				t.Errorf("%s: got %d, %v; want an error naming %s", tc.name, got, err, tc.errContains)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

// A per-peer key at 0 takes a tenth of its global limit; negative is none.
func TestPeerShareDefaults(t *testing.T) {
	for _, tc := range []struct{ v, global, want int }{
		{0, 200000, 20000}, {0, 300, 30}, {0, 5, 1}, {0, 0, 0}, {7, 300, 7}, {-1, 300, 0},
	} {
		if got := peerShare(tc.v, tc.global); got != tc.want {
			t.Errorf("peerShare(%d, %d) = %d, want %d", tc.v, tc.global, got, tc.want)
		}
	}
}

// limits.trusted_peers takes prefixes and addresses, IPv4-mapped ones as
// IPv4 (as client addresses are read); a bad entry is a config error at its
// index and line.
func TestTrustedPeersParsed(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.0/8": "10.0.0.0/8", "10.1.2.3/8": "10.0.0.0/8", "10.1.2.3": "10.1.2.3/32",
		"fd00::/8": "fd00::/8", "::ffff:10.0.0.0/104": "10.0.0.0/8", "::ffff:10.1.2.3": "10.1.2.3/32",
	} {
		got, err := parsePeerPrefix(in)
		if err != nil || got.String() != want {
			t.Errorf("parsePeerPrefix(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	_, err := ParseConfig("relay.yaml", []byte("limits:\n  trusted_peers:\n  - 10.0.0.0/8\n  - relay.example\n"))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "limits.trusted_peers[1]" || ce.Line != 4 {
		t.Fatalf("err = %v, want one naming limits.trusted_peers[1] at line 4", err)
	}
}
