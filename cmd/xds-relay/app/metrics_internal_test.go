package app

import (
	"strings"
	"testing"

	"github.com/xds-relay/xds-relay/shard/clientlog"
)

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

// A class label value is freed only when no live class holds it: two
// classes whose cut names collide share one until both are dropped, and
// a class counted as "other" while the values were taken gets its own
// once one is free.
func TestClassLabelsFreedWhenUnused(t *testing.T) {
	c := classLabels{max: 2}
	long := strings.Repeat("x", maxClassLabelBytes+10)
	a, b := long+"-a", long+"-b"
	c.created(a)
	c.created(b)
	if la, lb := c.label(a), c.label(b); la != lb || la == otherClass {
		t.Fatalf("labels %q, %q: want one shared cut value", la, lb)
	}
	c.created("late")
	if l := c.label("late"); l != otherClass {
		t.Fatalf("a third class got %q, want other", l)
	}
	if freed := c.dropped(a); freed != "" {
		t.Fatalf("dropping one of two sharing a value freed %q", freed)
	}
	if l := c.label("late"); l != "late" {
		t.Fatalf("after a value was freed, the folded class got %q, want its own", l)
	}
	if freed := c.dropped(b); freed != clientlog.Truncate(b, maxClassLabelBytes) {
		t.Fatalf("dropping the last holder freed %q", freed)
	}
	if l := c.label(b); l != otherClass {
		t.Errorf("a dropped class is counted as %q, want other (it takes no value)", l)
	}
}

// Counting by class allocates nothing once the label tuple is known.
func TestClassCounterDoesNotAllocate(t *testing.T) {
	tel, err := newTelemetry(gauges{classesAndShards: func() (int, int) { return 0, 0 }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.shutdown()
	tel.classCreated("class-a")
	tel.ClientACK("class-a", "type.googleapis.com/envoy.config.cluster.v3.Cluster")
	if n := testing.AllocsPerRun(100, func() {
		tel.ClientACK("class-a", "type.googleapis.com/envoy.config.cluster.v3.Cluster")
	}); n != 0 {
		t.Fatalf("ClientACK allocates %v times per call, want 0", n)
	}
}
