package app

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/xds-relay/xds-relay/shard/clientlog"
)

// The class label. limits.max_metric_classes classes hold a label value
// of their own at a time; the others are counted as "other". A class's
// value is freed when the class is dropped (after node_classes.linger),
// and its series leave /metrics: the counters by class are observable
// instruments reporting counts kept here, and OpenTelemetry's SDK exports
// an observable's attribute set only while the callback observes it
// (sdk/metric: "Unused attribute sets do not report"). A synchronous
// counter keeps every attribute set it was given for good.

// maxClassLabelBytes cuts a class label value (class names are bounded by
// limits.max_class_name_bytes already; this is what a series can hold).
const maxClassLabelBytes = 128

// otherClass is the label value of the classes without one of their own.
const otherClass = "other"

// classLabels bounds the class label: a live class takes a free label
// value, its name cut to maxClassLabelBytes, when it is created or (if
// none was free then) when it is next counted once one is; a dropped
// class gives its value back. Whoever can name a class (any client, with
// the default rule) cannot grow /metrics, nor keep a real class under
// "other" by creating throwaway classes first.
type classLabels struct {
	max int // set before use, read-only; 0: 256

	mu    sync.RWMutex
	live  map[string]int    // class name -> classes of it in the registry (a dropped one and its successor may overlap); guarded by mu
	seen  map[string]string // class -> label, live classes only; guarded by mu
	users map[string]int    // label -> classes holding it (cut names can collide); guarded by mu
}

// label is class's label value: its own, or "other".
func (c *classLabels) label(class string) string {
	c.mu.RLock()
	l, ok := c.seen[class]
	room := len(c.seen) < c.limit() && c.live[class] > 0
	c.mu.RUnlock()
	switch {
	case ok:
		return l
	case !room:
		return otherClass
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.assignLocked(class)
}

// created counts a new class of this name and gives it a label if one is
// free.
func (c *classLabels) created(class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live == nil {
		c.live, c.seen, c.users = map[string]int{}, map[string]string{}, map[string]int{}
	}
	c.live[class]++
	c.assignLocked(class)
}

// dropped uncounts a class of this name; when it was the last, its label
// is free again. freed is the label value no class holds any more (its
// series are to go), "" if none.
func (c *classLabels) dropped(class string) (freed string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live[class]--; c.live[class] > 0 {
		return ""
	}
	delete(c.live, class)
	l, ok := c.seen[class]
	if !ok {
		return ""
	}
	delete(c.seen, class)
	if c.users[l]--; c.users[l] > 0 || l == otherClass {
		return ""
	}
	delete(c.users, l)
	return l
}

func (c *classLabels) assignLocked(class string) string {
	if l, ok := c.seen[class]; ok {
		return l
	}
	if len(c.seen) >= c.limit() || c.live[class] == 0 {
		return otherClass
	}
	l := clientlog.Truncate(class, maxClassLabelBytes)
	c.seen[class] = l
	c.users[l]++
	return l
}

func (c *classLabels) limit() int {
	if c.max <= 0 {
		return 256
	}
	return c.max
}

// classCounter is a counter with a class label (the first label of each
// tuple), whose series go when the class's label is freed (forget).
type classCounter struct {
	mu sync.RWMutex
	n  map[[6]string]*classCount // label tuple -> count; guarded by mu
}

type classCount struct {
	v   atomic.Int64
	obs []metric.ObserveOption // the tuple's attributes, built once
}

// newClassCounter registers an observable counter reporting the counts.
func newClassCounter(m metric.Meter, name, desc string) (*classCounter, error) {
	c := &classCounter{n: map[[6]string]*classCount{}}
	_, err := m.Int64ObservableCounter(name, metric.WithDescription(desc),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			c.mu.RLock()
			defer c.mu.RUnlock()
			for _, n := range c.n {
				o.Observe(n.v.Load(), n.obs...)
			}
			return nil
		}))
	return c, err
}

// add counts one for a label tuple ("class", label, then at most two more
// pairs).
func (c *classCounter) add(kv ...string) {
	var key [6]string
	copy(key[:], kv)
	c.mu.RLock()
	n, ok := c.n[key]
	c.mu.RUnlock()
	if !ok {
		n = c.create(key)
	}
	n.v.Add(1)
}

func (c *classCounter) create(key [6]string) *classCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.n[key]; ok {
		return n
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	for i := 0; i+1 < len(key) && key[i] != ""; i += 2 {
		attrs = append(attrs, attribute.String(key[i], key[i+1]))
	}
	n := &classCount{obs: []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}}
	c.n[key] = n
	return n
}

// forget removes the series of a class label value.
func (c *classCounter) forget(label string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.n {
		if key[1] == label {
			delete(c.n, key)
		}
	}
}

// classCreated gives a new class a label value of its own if one is free.
func (t *telemetry) classCreated(class string) { t.classes.created(class) }

// classDropped frees a dropped class's label value, and removes its
// series, unless another class of the name still holds it.
func (t *telemetry) classDropped(class string) {
	l := t.classes.dropped(class)
	if l == "" {
		return
	}
	for _, c := range t.byClass {
		c.forget(l)
	}
}
