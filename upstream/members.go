package upstream

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/xds-relay/xds-relay/upstream/rendezvous"
)

// member is one upstream a class stream can be sent to, with its own
// connection pool (pool.go: upstream.max_connections and the peer's stream
// limit hold per member). Read-only after creation.
type member struct {
	addr string
	pool *connPool
}

// errNoMember fails a class stream while no member of the tier is live.
var errNoMember = errors.New("no live upstream member (every member's connection fails, or none resolved)")

// memberSet is the upstreams the class streams pick from. Without affinity
// it is one member, upstream.address with its fallbacks, for every class.
// With upstream.affinity: class it is the tier's members (upstream.members,
// or what upstream.address resolves to: resolve.go), each class going to
// the live member rendezvous hashing picks for its name, so every relay in
// front of the tier sends a class to the same member. A member whose first
// connection is in TRANSIENT_FAILURE is out of the live set until it is
// READY again (health by connection state); a member is live from its
// addition until its connection first fails.
type memberSet struct {
	// Read-only after creation.
	affinity bool
	newPool  func(addr string, onFirst func(*grpc.ClientConn, connectivity.State)) *connPool

	// Guarded by mu, a leaf: nothing is called under it.
	mu      sync.Mutex
	all     map[string]*member // by address
	down    map[string]bool    // members whose first connection failed, until READY
	live    []string           // the addresses of all but down, sorted
	changed chan struct{}      // closed and replaced when live changes
	retired []*member          // left the set; closed once they carry no stream
	closed  bool
}

// fixedMembers is the set of one member without affinity.
func fixedMembers(addr string, pool *connPool) *memberSet {
	m := &member{addr: addr, pool: pool}
	return &memberSet{all: map[string]*member{addr: m}, live: []string{addr}, down: map[string]bool{}, changed: make(chan struct{})}
}

// affinityMembers is an empty set of affinity members; set fills it.
func affinityMembers(newPool func(string, func(*grpc.ClientConn, connectivity.State)) *connPool) *memberSet {
	return &memberSet{affinity: true, newPool: newPool, all: map[string]*member{}, down: map[string]bool{}, changed: make(chan struct{})}
}

// pick is the member the class named key goes to (nil: none is live).
func (ms *memberSet) pick(key string) *member {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if !ms.affinity {
		return ms.all[ms.live[0]]
	}
	return ms.all[rendezvous.Pick(key, ms.live)]
}

// watch is closed at the next change of the live set; nil without
// affinity (it never changes).
func (ms *memberSet) watch() <-chan struct{} {
	if !ms.affinity {
		return nil
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	return ms.changed
}

// updateLiveLocked recomputes live and wakes the watchers if it changed.
func (ms *memberSet) updateLiveLocked() {
	live := make([]string, 0, len(ms.all))
	for a := range ms.all {
		if !ms.down[a] {
			live = append(live, a)
		}
	}
	slices.Sort(live)
	if slices.Equal(live, ms.live) {
		return
	}
	ms.live = live
	close(ms.changed)
	ms.changed = make(chan struct{})
}

// set makes addrs the members: new ones get a pool (its first connection
// dialed, so its health is known), those left out are retired, and closed
// once no stream uses them. Called by one goroutine at a time (New, then
// the resolver's).
func (ms *memberSet) set(addrs []string) error {
	ms.mu.Lock()
	var add []string
	for _, a := range addrs {
		if ms.all[a] == nil && !slices.Contains(add, a) {
			add = append(add, a)
		}
	}
	ms.mu.Unlock()
	var made []*member
	var errs []error
	for _, a := range add {
		m := &member{addr: a}
		m.pool = ms.newPool(a, func(cc *grpc.ClientConn, st connectivity.State) { ms.observe(m, cc, st) })
		if err := m.pool.open(); err != nil {
			errs = append(errs, fmt.Errorf("member %s: %w", a, err))
			continue
		}
		made = append(made, m)
	}
	ms.mu.Lock()
	if ms.closed {
		ms.mu.Unlock()
		for _, m := range made {
			_ = m.pool.close()
		}
		return errPoolClosed
	}
	for a, m := range ms.all {
		if !slices.Contains(addrs, a) {
			delete(ms.all, a)
			delete(ms.down, a)
			ms.retired = append(ms.retired, m)
		}
	}
	for _, m := range made {
		ms.all[m.addr] = m
	}
	ms.updateLiveLocked()
	retired := ms.retired
	ms.retired = nil
	ms.mu.Unlock()
	var busy []*member
	for _, m := range retired {
		if m.pool.busy() {
			busy = append(busy, m)
		} else {
			_ = m.pool.close()
		}
	}
	ms.mu.Lock()
	closed := ms.closed
	if !closed {
		ms.retired = append(ms.retired, busy...)
	}
	ms.mu.Unlock()
	if closed {
		for _, m := range busy {
			_ = m.pool.close()
		}
	}
	return errors.Join(errs...)
}

// observe follows the state of m's first connection: its health.
func (ms *memberSet) observe(m *member, cc *grpc.ClientConn, st connectivity.State) {
	switch st {
	case connectivity.Idle:
		// No stream keeps it up: reconnect, to know the member's health.
		cc.Connect()
		return
	case connectivity.TransientFailure, connectivity.Ready:
	default:
		return
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.all[m.addr] != m {
		return // retired
	}
	if st == connectivity.TransientFailure {
		ms.down[m.addr] = true
	} else {
		delete(ms.down, m.addr)
	}
	ms.updateLiveLocked()
}

// MemberStatus is one member of an affinity tier, for the admin endpoints.
type MemberStatus struct {
	Address string `json:"address"`
	// Live: a class may be sent to it (its connection has not failed since
	// it was last ready).
	Live        bool `json:"live"`
	Connections int  `json:"connections"`
	// Classes is how many classes it was picked for, by the session
	// each class stream runs now or ran last.
	Classes int `json:"classes"`
}

// status is every member, sorted by address (nil without affinity).
func (ms *memberSet) status() []MemberStatus {
	if !ms.affinity {
		return nil
	}
	ms.mu.Lock()
	members := make([]*member, 0, len(ms.all))
	for _, m := range ms.all {
		members = append(members, m)
	}
	down := make(map[string]bool, len(ms.down))
	for a := range ms.down {
		down[a] = true
	}
	ms.mu.Unlock()
	out := make([]MemberStatus, 0, len(members))
	for _, m := range members {
		out = append(out, MemberStatus{Address: m.addr, Live: !down[m.addr], Connections: m.pool.connections()})
	}
	slices.SortFunc(out, func(a, b MemberStatus) int { return strings.Compare(a.Address, b.Address) })
	return out
}

// close closes every member's pool, retired ones too.
func (ms *memberSet) close() error {
	ms.mu.Lock()
	ms.closed = true
	var all []*member
	for _, m := range ms.all {
		all = append(all, m)
	}
	all = append(all, ms.retired...)
	ms.all, ms.retired = map[string]*member{}, nil
	ms.mu.Unlock()
	var errs []error
	for _, m := range all {
		errs = append(errs, m.pool.close())
	}
	return errors.Join(errs...)
}
