package app

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/xds-relay/xds-relay/upstream"
)

// registerMemberMetrics observes an affinity tier's members
// (upstream.affinity: class) at each scrape: how many are live and down,
// and the classes on each. members nil: no series.
func registerMemberMetrics(m metric.Meter, members func() []upstream.MemberStatus) error {
	count, err := m.Int64ObservableGauge("xds_relay_upstream_members", metric.WithDescription("Members of the upstream affinity tier (upstream.affinity: class), by state: live (classes may go to it) or down (its connection failed)."))
	if err != nil {
		return err
	}
	classes, err := m.Int64ObservableGauge("xds_relay_upstream_member_classes", metric.WithDescription("Classes whose upstream stream is on the member of the affinity tier, by member."))
	if err != nil {
		return err
	}
	live, down := metric.WithAttributes(attribute.String("state", "live")), metric.WithAttributes(attribute.String("state", "down"))
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if members == nil {
			return nil
		}
		ms := members()
		if len(ms) == 0 {
			return nil
		}
		var nLive, nDown int64
		for _, st := range ms {
			if st.Live {
				nLive++
			} else {
				nDown++
			}
			o.ObserveInt64(classes, int64(st.Classes), metric.WithAttributes(attribute.String("member", st.Address)))
		}
		o.ObserveInt64(count, nLive, live)
		o.ObserveInt64(count, nDown, down)
		return nil
	}, count, classes)
	return err
}
