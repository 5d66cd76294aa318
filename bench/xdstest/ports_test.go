package xdstest

import (
	"net"
	"strconv"
	"testing"
)

// A control plane's port stays reserved while it is down, so no other
// control plane of the process picks it, and is released by Stop.
func TestControlPlanePortReservedUntilStop(t *testing.T) {
	cp, err := StartControlPlane(CPOptions{Cache: Snapshot})
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(cp.Addr)
	port, _ := strconv.Atoi(p)
	reserved := func() bool {
		reservedPorts.Lock()
		defer reservedPorts.Unlock()
		_, ok := reservedPorts.m[port]
		return ok
	}
	if port >= ephemeralPortStart() {
		t.Skipf("port %d from the ephemeral range (nothing free below it)", port)
	}
	cp.Down()
	if !reserved() {
		t.Fatalf("port %d not reserved while its control plane is down", port)
	}
	if err := cp.Up(0); err != nil {
		t.Fatal(err)
	}
	cp.Stop()
	if reserved() {
		t.Fatalf("port %d still reserved after Stop", port)
	}
}
