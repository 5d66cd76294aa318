package main

import (
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/bench"
)

// The table gives each run's ratios to the limit run and to the direct run
// at the same N.
func TestWriteTableRatios(t *testing.T) {
	results := []*bench.FanoutResult{
		{Target: bench.TargetRelay, Cache: "snapshot", Clients: 10, Last: 3 * time.Second, ServerCPU: 2 * time.Second, ServerRSSBase: 1 << 20, ServerRSSIdle: 1<<20 + 10*20*1024},
		{Target: bench.TargetLimit, Clients: 10, Last: 2 * time.Second, ServerCPU: time.Second},
		{Target: bench.TargetDirect, Cache: "linear", Clients: 10, Last: 8 * time.Second, ServerCPU: 6 * time.Second},
	}
	var b strings.Builder
	if err := writeTable(&b, results); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a header and 3 rows:\n%s", len(lines), b.String())
	}
	relay := strings.Fields(lines[1])
	for _, want := range []string{"relay:snapshot", "1.50×", "2.00×", "3.0×", "20.0"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("relay row %q lacks %q", relay, want)
		}
	}
	if !strings.Contains(lines[0], "direct:linear CPU ÷ CPU") {
		t.Errorf("header %q lacks the direct:linear column", lines[0])
	}
}

// The control plane's table gives, on a relay row, how many times direct's
// control plane (same N, classes and cache) spends more.
func TestWriteControlPlaneTable(t *testing.T) {
	results := []*bench.FanoutResult{
		{Target: bench.TargetRelay, Cache: "snapshot", Clients: 10, Classes: 2, UpstreamStreams: 2,
			ControlPlane: &bench.ControlPlaneUsage{Child: true, ConnectCPU: 10 * time.Millisecond, UpdateCPU: 5 * time.Millisecond, RSSIdle: 20 << 20}},
		{Target: bench.TargetRelay, Cache: "snapshot", Clients: 20, Classes: 2}, // control plane not measured: no row
		{Target: bench.TargetDirect, Cache: "snapshot", Clients: 10, Classes: 2, UpstreamStreams: 10,
			ControlPlane: &bench.ControlPlaneUsage{ConnectCPU: 400 * time.Millisecond, UpdateCPU: 150 * time.Millisecond, RSSIdle: 100 << 20}},
	}
	var b strings.Builder
	if err := writeControlPlaneTable(&b, results); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want a header and 2 rows:\n%s", len(lines), b.String())
	}
	for _, want := range []string{"relay:snapshot", "40.0×", "30.0×", "5.0×"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("relay row %q lacks %q", lines[1], want)
		}
	}
	if strings.Contains(lines[2], "×") {
		t.Errorf("direct row %q has ratios to itself", lines[2])
	}
}
