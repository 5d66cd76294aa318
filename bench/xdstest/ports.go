package xdstest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// reservedPorts are the ports control planes of this process took below the
// ephemeral range, kept from Down to Up: another control plane picking one
// while its owner is down would make the owner's Up fail ("listen again:
// address already in use", seen once in 90,000 conformance schedules run 30
// at a time). Released by Stop.
var reservedPorts = struct {
	sync.Mutex
	m map[int]struct{}
}{m: map[int]struct{}{}}

// listenOutsideEphemeral listens on a loopback port below the kernel's
// ephemeral range, so that Up can take it again after Down: a port from the
// range may meanwhile become the local port of some outgoing connection
// (a relay's, a client's), and stay taken as long as it lives. The port is
// reserved in this process until Stop. It falls back to any free port when
// the range cannot be read or nothing below it is free.
func listenOutsideEphemeral() (net.Listener, error) {
	const first = 10000 // well above the ports services commonly use
	low := ephemeralPortStart()
	reservedPorts.Lock()
	defer reservedPorts.Unlock()
	for range 50 { // bounded: each try is one bind
		if low <= first {
			break
		}
		port := first + rand.IntN(low-first)
		if _, taken := reservedPorts.m[port]; taken {
			continue
		}
		if lis, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			reservedPorts.m[port] = struct{}{}
			return lis, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// releasePort forgets the reservation of addr's port, if any.
func releasePort(addr string) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return
	}
	reservedPorts.Lock()
	delete(reservedPorts.m, port)
	reservedPorts.Unlock()
}

// ephemeralPortStart is the first port of the kernel's ephemeral range
// (Linux's default when it cannot be read).
func ephemeralPortStart() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}
