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

// A dropped class's label tuples leave the cache (the cache would
// otherwise grow with every class that ever existed).
func TestForgetClassDropsLabels(t *testing.T) {
	tel, err := newTelemetry(gauges{classesAndShards: func() (int, int) { return 0, 0 }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown()
	const cds = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	tel.ClientACK("gone", cds)
	tel.Response("gone", cds, true)
	tel.Reconnecting("gone")
	tel.ClientACK("kept", cds)
	tel.Pushed("sotw-ads", cds, 1)
	tel.forgetClass("gone")
	for key := range tel.attrs {
		if key[1] == "gone" {
			t.Errorf("label tuple %v of a dropped class is still cached", key)
		}
	}
	if n := len(tel.attrs); n != 2 {
		t.Errorf("%d label tuples cached, want the other class's and the push's", n)
	}
}
