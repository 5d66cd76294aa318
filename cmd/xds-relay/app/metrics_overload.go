package app

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/xds-relay/xds-relay/relay/overload"
)

// registerOverloadMetrics registers the memory ceiling's series, read from
// status at each scrape (nothing is observed while the relay has none):
// its state, heap and budget, and what it shed and refused.
func registerOverloadMetrics(m metric.Meter, status func() (overload.Status, bool)) error {
	var errs []error
	keep := func(err error) { errs = append(errs, err) }
	state, e := m.Int64ObservableGauge("xds_relay_overload_state", metric.WithDescription("The memory ceiling's state: 0 normal, 1 shedding (past overload.shed_ratio), 2 refusing new streams and subscriptions (past overload.refuse_ratio)."))
	keep(e)
	heap, e := m.Int64ObservableGauge("xds_relay_overload_heap_bytes", metric.WithDescription("The live heap at the last GC, as the memory ceiling last read it."), metric.WithUnit("By"))
	keep(e)
	budget, e := m.Int64ObservableGauge("xds_relay_overload_budget_bytes", metric.WithDescription("The memory budget (overload.memory_budget_bytes, GOMEMLIMIT or the container's limit)."), metric.WithUnit("By"))
	keep(e)
	shed, e := m.Int64ObservableCounter("xds_relay_overload_shed", metric.WithDescription("Lingering state shed past the soft memory mark, by what: class, shard."))
	keep(e)
	refusals, e := m.Int64ObservableCounter("xds_relay_overload_refusals", metric.WithDescription("New streams, subscriptions and REST polls refused past the refuse memory mark."))
	keep(e)
	classAttr := metric.WithAttributes(attribute.String("what", "class"))
	shardAttr := metric.WithAttributes(attribute.String("what", "shard"))
	_, e = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st, ok := status()
		if !ok {
			return nil
		}
		n := int64(overload.Normal)
		for s := overload.Normal; s <= overload.Refusing; s++ {
			if s.String() == st.State {
				n = int64(s)
			}
		}
		o.ObserveInt64(state, n)
		o.ObserveInt64(heap, int64(st.HeapBytes))
		o.ObserveInt64(budget, int64(st.BudgetBytes))
		o.ObserveInt64(shed, st.ShedClasses, classAttr)
		o.ObserveInt64(shed, st.ShedShards, shardAttr)
		o.ObserveInt64(refusals, st.Refusals)
		return nil
	}, state, heap, budget, shed, refusals)
	keep(e)
	return errors.Join(errs...)
}
