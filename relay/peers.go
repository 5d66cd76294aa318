package relay

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// PeerLimits are each peer's share of the relay's global limits, so that
// one client address cannot take all of limits.max_streams,
// server.max_connections or limits.max_classes and lock the others out. A
// peer is a client IP address; an IPv6 peer is its /64, the block one host
// is given (SLAAC), so a host cannot multiply its share by its addresses.
// IPv4-mapped IPv6 addresses are their IPv4 address. A zero field is no
// limit (the configuration gives the defaults).
type PeerLimits struct {
	// MaxStreams bounds a peer's open streams (limits.max_streams_per_peer).
	MaxStreams int
	// MaxConnections bounds a peer's open connections, on the xDS and REST
	// listeners together (limits.max_connections_per_peer).
	MaxConnections int
	// NewClasses bounds the classes a peer may create per NewClassesWindow
	// (limits.new_classes_per_peer, limits.new_classes_window): a token
	// bucket of NewClasses tokens refilled over the window. Joining a class
	// that exists is free.
	NewClasses       int
	NewClassesWindow time.Duration
	// StreamsPerSecond and StreamBurst rate-limit a peer's new streams
	// (limits.streams_per_peer_per_second, limits.streams_per_peer_burst):
	// a reconnect loop is refused before its first request is read.
	StreamsPerSecond float64
	StreamBurst      int
	// Trusted are the addresses whose clients take no share
	// (limits.trusted_peers): the relays of a tier below, which carry every
	// class of their own clients over one address, or a load balancer that
	// does not keep the clients' addresses. The global limits still apply.
	Trusted []netip.Prefix
	// MaxPeers bounds the peer table (limits.max_peers). An entry lives
	// while its peer holds a connection or a stream, or its buckets are
	// not full; at the cap a new peer evicts an idle one, and is refused
	// when every entry is in use.
	MaxPeers int
}

// The configuration keys a peer is refused for, as named in refusals and
// counted (PeerStats.Refused).
const (
	KeyMaxConnections        = "server.max_connections"
	KeyMaxConnectionsPerPeer = "limits.max_connections_per_peer"
	KeyMaxStreamsPerPeer     = "limits.max_streams_per_peer"
	KeyStreamsPerPeerRate    = "limits.streams_per_peer_per_second"
	KeyNewClassesPerPeer     = "limits.new_classes_per_peer"
	KeyMaxPeers              = "limits.max_peers"
)

// PeerRefusalKeys are the keys PeerStats.Refused counts, in order.
var PeerRefusalKeys = []string{KeyMaxConnections, KeyMaxConnectionsPerPeer, KeyMaxStreamsPerPeer,
	KeyStreamsPerPeerRate, KeyNewClassesPerPeer, KeyMaxPeers}

// PeerLimitError is a peer refused for a limit, named by its key. It is a
// RESOURCE_EXHAUSTED gRPC status (REST answers 429).
type PeerLimitError struct {
	Key  string
	Peer netip.Prefix
	Msg  string // what the limit is
}

func (e *PeerLimitError) Error() string {
	return fmt.Sprintf("%s: peer %s %s: try another relay", e.Key, peerString(e.Peer), e.Msg)
}

// GRPCStatus makes the error a RESOURCE_EXHAUSTED status.
func (e *PeerLimitError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// Peers is the per-peer accounting of connections, streams, stream starts
// and class creations, shared by the xDS and REST listeners and the server.
// Safe for concurrent use.
type Peers struct {
	// Read-only after creation.
	limits PeerLimits
	now    func() time.Time

	// Atomic: what /metrics reads.
	refused [6]atomic.Int64 // by PeerRefusalKeys index
	conns   atomic.Int64    // open connections, all peers (ConnGate)

	mu    sync.Mutex
	table map[netip.Prefix]*peerEntry // guarded by mu
}

// peerEntry is one peer's usage, guarded by Peers.mu.
type peerEntry struct {
	conns, streams int
	starts         *rate.Limiter // nil: stream starts not limited
	classes        *rate.Limiter // nil: class creations not limited
}

// NewPeers returns an empty table applying l.
func NewPeers(l PeerLimits) *Peers {
	return &Peers{limits: l, now: time.Now, table: map[netip.Prefix]*peerEntry{}}
}

// PeerStats is the table's state for /metrics.
type PeerStats struct {
	Peers       int     // entries in the table
	Connections int64   // open connections counted by ConnGates
	Refused     []int64 // refusals, by PeerRefusalKeys
}

// Stats returns the table's counts.
func (p *Peers) Stats() PeerStats {
	p.mu.Lock()
	n := len(p.table)
	p.mu.Unlock()
	st := PeerStats{Peers: n, Connections: p.conns.Load(), Refused: make([]int64, len(p.refused))}
	for i := range p.refused {
		st.Refused[i] = p.refused[i].Load()
	}
	return st
}

// refuse counts a refusal for key and returns its error.
func (p *Peers) refuse(key string, peer netip.Prefix, format string, args ...any) error {
	for i, k := range PeerRefusalKeys {
		if k == key {
			p.refused[i].Add(1)
		}
	}
	return &PeerLimitError{Key: key, Peer: peer, Msg: fmt.Sprintf(format, args...)}
}

// accounted is the peer addr's client is accounted as; false for a client
// that takes no share: not IP, or within limits.trusted_peers.
func (p *Peers) accounted(addr net.Addr) (netip.Prefix, bool) {
	ip, ok := ipOf(addr)
	if !ok {
		return netip.Prefix{}, false
	}
	for _, t := range p.limits.Trusted {
		if t.Contains(ip) {
			return netip.Prefix{}, false
		}
	}
	return peerPrefix(ip), true
}

// peerOf is the peer an address belongs to; false for an address that is
// not IP (a Unix socket, a test's pipe): such clients are not accounted.
func peerOf(addr net.Addr) (netip.Prefix, bool) {
	ip, ok := ipOf(addr)
	if !ok {
		return netip.Prefix{}, false
	}
	return peerPrefix(ip), true
}

// ipOf is addr's IP address, IPv4-mapped ones as IPv4, without a zone.
func ipOf(addr net.Addr) (netip.Addr, bool) {
	var ip netip.Addr
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if addr == nil {
			return ip, false
		}
		ap, err := netip.ParseAddrPort(addr.String())
		if err != nil {
			return ip, false
		}
		ip = ap.Addr()
	}
	if !ip.IsValid() {
		return ip, false
	}
	return ip.Unmap().WithZone(""), true
}

// peerPrefix is the peer ip belongs to: the address for IPv4, its /64 for
// IPv6.
func peerPrefix(ip netip.Addr) netip.Prefix {
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	pfx, _ := ip.Prefix(bits)
	return pfx
}

// peerString is a peer as shown: the address for IPv4, the /64 for IPv6.
func peerString(p netip.Prefix) string {
	if p.Addr().Is4() {
		return p.Addr().String()
	}
	return p.String()
}

// entryLocked returns peer's entry, making it within MaxPeers (mu held).
func (p *Peers) entryLocked(peer netip.Prefix) (*peerEntry, error) {
	if e, ok := p.table[peer]; ok {
		return e, nil
	}
	p.sweepLocked(2)
	if max := p.limits.MaxPeers; max > 0 && len(p.table) >= max && !p.evictLocked() {
		return nil, p.refuse(KeyMaxPeers, peer, "is new while the relay tracks its limit of %d peers, each with connections or streams", max)
	}
	e := &peerEntry{}
	if l := p.limits; l.StreamsPerSecond > 0 && l.StreamBurst > 0 {
		e.starts = rate.NewLimiter(rate.Limit(l.StreamsPerSecond), l.StreamBurst)
	}
	if l := p.limits; l.NewClasses > 0 && l.NewClassesWindow > 0 {
		e.classes = rate.NewLimiter(rate.Every(l.NewClassesWindow/time.Duration(l.NewClasses)), l.NewClasses)
	}
	p.table[peer] = e
	return e, nil
}

// spent reports whether the entry still remembers something: an open
// connection or stream, or a bucket not yet refilled.
func (e *peerEntry) spent(now time.Time) bool {
	notFull := func(l *rate.Limiter) bool { return l != nil && l.TokensAt(now) < float64(l.Burst()) }
	return e.conns > 0 || e.streams > 0 || notFull(e.starts) || notFull(e.classes)
}

// sweepLocked looks at up to n entries and frees those that remember
// nothing, so entries of peers gone quiet do not wait for the cap (mu
// held). Map order is random: the sweep samples the table.
func (p *Peers) sweepLocked(n int) {
	now := p.now()
	for k, e := range p.table {
		if n--; n < 0 {
			return
		}
		if !e.spent(now) {
			delete(p.table, k)
		}
	}
}

// evictLocked frees one entry without connections or streams, its buckets
// forgotten, looking at up to 64 entries; false when it found none (mu
// held).
func (p *Peers) evictLocked() bool {
	n := 0
	for k, e := range p.table {
		if e.conns == 0 && e.streams == 0 {
			delete(p.table, k)
			return true
		}
		if n++; n >= 64 {
			break
		}
	}
	return false
}

// forgetLocked frees peer's entry if it remembers nothing (mu held).
func (p *Peers) forgetLocked(peer netip.Prefix, e *peerEntry) {
	if !e.spent(p.now()) {
		delete(p.table, peer)
	}
}

// openConn accounts a new connection from addr within the peer's share;
// done, called once when the connection closes, returns it.
func (p *Peers) openConn(addr net.Addr) (done func(), err error) {
	return p.open(addr, func(peer netip.Prefix, e *peerEntry) (*int, error) {
		if max := p.limits.MaxConnections; max > 0 && e.conns >= max {
			return nil, p.refuse(KeyMaxConnectionsPerPeer, peer, "holds its share of %d connections", max)
		}
		return &e.conns, nil
	})
}

// openStream accounts a new stream from addr within the peer's share of
// streams and its rate of new streams; done returns it.
func (p *Peers) openStream(addr net.Addr) (done func(), err error) {
	return p.open(addr, func(peer netip.Prefix, e *peerEntry) (*int, error) {
		if max := p.limits.MaxStreams; max > 0 && e.streams >= max {
			return nil, p.refuse(KeyMaxStreamsPerPeer, peer, "holds its share of %d streams", max)
		}
		if e.starts != nil && !e.starts.AllowN(p.now(), 1) {
			return nil, p.refuse(KeyStreamsPerPeerRate, peer, "opens streams faster than %v a second (burst %d)", e.starts.Limit(), e.starts.Burst())
		}
		return &e.streams, nil
	})
}

// open is openConn's and openStream's frame: admit checks the peer's
// entry and returns the count to take one of.
func (p *Peers) open(addr net.Addr, admit func(netip.Prefix, *peerEntry) (*int, error)) (func(), error) {
	peer, ok := p.accounted(addr)
	if !ok {
		return func() {}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, err := p.entryLocked(peer)
	if err != nil {
		return nil, err
	}
	n, err := admit(peer, e)
	if err != nil {
		p.forgetLocked(peer, e)
		return nil, err
	}
	*n++
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			*n--
			p.forgetLocked(peer, e)
		})
	}, nil
}

// newClass charges one class creation to addr's peer.
func (p *Peers) newClass(addr net.Addr) error {
	peer, ok := p.accounted(addr)
	if !ok || p.limits.NewClasses <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, err := p.entryLocked(peer)
	if err != nil {
		return err
	}
	if e.classes != nil && !e.classes.AllowN(p.now(), 1) {
		return p.refuse(KeyNewClassesPerPeer, peer, "created its share of %d new classes within %v", p.limits.NewClasses, p.limits.NewClassesWindow)
	}
	return nil
}
