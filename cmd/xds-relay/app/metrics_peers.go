package app

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/xds-relay/xds-relay/relay"
)

// registerPeerMetrics adds the connection and per-peer series, read from
// stats at each scrape (nil: none): open connections, the peers tracked,
// and the refusals by the key that refused them.
func (t *telemetry) registerPeerMetrics(m metric.Meter, stats func() relay.PeerStats) error {
	conns, err := m.Int64ObservableGauge("xds_relay_downstream_connections", metric.WithDescription("Open client connections on the xDS and REST listeners (capped by server.max_connections)."))
	if err != nil {
		return err
	}
	peers, err := m.Int64ObservableGauge("xds_relay_peers", metric.WithDescription("Client peers (an IPv4 address or IPv6 /64) the relay accounts shares for (capped by limits.max_peers)."))
	if err != nil {
		return err
	}
	refused, err := m.Int64ObservableCounter("xds_relay_peer_refusals", metric.WithDescription("Connections, streams and class creations refused for a connection or per-peer limit, by the key (limit) refusing them."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if stats == nil {
			return nil
		}
		st := stats()
		if st.Refused == nil {
			return nil // not started
		}
		o.ObserveInt64(conns, st.Connections)
		o.ObserveInt64(peers, int64(st.Peers))
		for i, key := range relay.PeerRefusalKeys {
			o.ObserveInt64(refused, st.Refused[i], t.opt("limit", key).obs...)
		}
		return nil
	}, conns, peers, refused)
	return err
}
