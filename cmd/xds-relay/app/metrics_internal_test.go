package app

import "testing"

// Recording a push allocates nothing once its label tuple is known (the
// push path runs once per response per client).
func TestPushMetricDoesNotAllocate(t *testing.T) {
	tel, err := newTelemetry(gauges{classesAndShards: func() (int, int) { return 0, 0 }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown()
	tel.Pushed("sotw-ads", "type.googleapis.com/envoy.config.cluster.v3.Cluster", 100)
	if n := testing.AllocsPerRun(100, func() {
		tel.Pushed("sotw-ads", "type.googleapis.com/envoy.config.cluster.v3.Cluster", 100)
	}); n != 0 {
		t.Fatalf("Pushed allocates %v times per call, want 0", n)
	}
}
