package app

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/shard/clientlog"
)

// unlimitedFDs is an fd limit past which the relay sets no connection cap of
// its own (RLIM_INFINITY reads as the largest uint64).
const unlimitedFDs = 1 << 30

// rlimitNoFile is the process's soft file descriptor limit (the Go runtime
// raises it to the hard limit at start).
func rlimitNoFile() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// maxConnections is server.max_connections as the gate applies it (0: no
// cap): as set, or the fd limit nofile less server.reserved_fds.
func maxConnections(c ServerConfig, nofile uint64) (int, error) {
	switch {
	case c.MaxConnections < 0:
		return 0, nil
	case c.MaxConnections > 0:
		return c.MaxConnections, nil
	case nofile >= unlimitedFDs:
		return 0, nil
	case nofile <= uint64(c.ReservedFDs):
		return 0, fmt.Errorf("server.reserved_fds: %d reserved leave no connections under the fd limit (RLIMIT_NOFILE) of %d: raise the limit (ulimit -n) or set server.max_connections", c.ReservedFDs, nofile)
	}
	return int(nofile) - c.ReservedFDs, nil
}

// peerShare is a per-peer key as relay.PeerLimits takes it: as set, a tenth
// of the global limit (at least 1) when 0, none (0) when negative or when
// the global limit is none.
func peerShare(v, global int) int {
	switch {
	case v < 0:
		return 0
	case v > 0:
		return v
	case global <= 0:
		return 0
	}
	return max(global/10, 1)
}

// buildPeers makes the per-peer table and the connection gate of the xDS
// and REST listeners.
func (r *Relay) buildPeers(clientLog *clientlog.Gate) error {
	cfg := r.cfg
	limit := r.fdLimit
	if limit == nil {
		limit = rlimitNoFile
	}
	nofile, err := limit()
	if err != nil {
		return fmt.Errorf("server.max_connections: reading the fd limit: %w", err)
	}
	maxConns, err := maxConnections(cfg.Server, nofile)
	if err != nil {
		return err
	}
	l := cfg.Limits
	trusted := make([]netip.Prefix, 0, len(l.TrustedPeers))
	for i, t := range l.TrustedPeers {
		pfx, err := parsePeerPrefix(t)
		if err != nil {
			return fmt.Errorf("limits.trusted_peers[%d]: %w", i, err)
		}
		trusted = append(trusted, pfx)
	}
	r.peers = relay.NewPeers(relay.PeerLimits{
		MaxStreams:       peerShare(l.MaxStreamsPerPeer, l.MaxStreams),
		MaxConnections:   peerShare(l.MaxConnectionsPerPeer, maxConns),
		NewClasses:       peerShare(l.NewClassesPerPeer, l.MaxClasses),
		NewClassesWindow: l.NewClassesWindow,
		StreamsPerSecond: offIfNegative(l.StreamsPerPeerPerSecond),
		StreamBurst:      l.StreamsPerPeerBurst,
		MaxPeers:         offIfNegative(l.MaxPeers),
		Trusted:          trusted,
	})
	r.gate = relay.NewConnGate(maxConns, r.peers, r.log.Named("downstream"), clientLog)
	return nil
}

// parsePeerPrefix is a limits.trusted_peers entry: a CIDR prefix
// ("10.0.0.0/8", "fd00::/8") or one address.
func parsePeerPrefix(s string) (netip.Prefix, error) {
	if pfx, err := netip.ParsePrefix(s); err == nil {
		if a := pfx.Addr(); a.Is4In6() && pfx.Bits() >= 96 {
			pfx = netip.PrefixFrom(a.Unmap(), pfx.Bits()-96) // as client addresses are read
		}
		return pfx.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR prefix (10.0.0.0/8) nor an IP address", s)
	}
	ip = ip.Unmap().WithZone("")
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}
