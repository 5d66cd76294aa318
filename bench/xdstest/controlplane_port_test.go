package xdstest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A control plane listens below the ephemeral port range, so Up can take
// its port again after Down: an outgoing connection could otherwise take it
// as its local port meanwhile (the conformance engine's "listen again:
// address already in use", once in 90,000 schedules).
func TestControlPlanePortOutsideEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no ephemeral range to stay out of: %v", err)
	}
	low, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil || low <= 10000 {
		t.Skipf("ephemeral range %q leaves no room below it", b)
	}
	cp, err := StartControlPlane(CPOptions{Cache: Snapshot})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	_, p, _ := net.SplitHostPort(cp.Addr)
	if port, _ := strconv.Atoi(p); port >= low {
		t.Fatalf("control plane on port %d, inside the ephemeral range from %d", port, low)
	}
	if err := cp.Restart(); err != nil {
		t.Fatalf("restart on its port: %v", err)
	}
}
