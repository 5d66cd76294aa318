package relay

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// ConnLimits are the gRPC server's connection-level limits (config keys
// server.*): what a client that never completes a connection, floods
// headers or pings, or holds an idle connection can make the relay hold.
// Zero values take the defaults.
type ConnLimits struct {
	// MaxHeaderListBytes bounds one request's header list (HTTP/2
	// SETTINGS_MAX_HEADER_LIST_SIZE, default 64 KiB): a stream over it is
	// reset, and a client flooding CONTINUATION frames past twice the limit
	// loses its connection. gRPC's default is 16 MiB per connection.
	MaxHeaderListBytes int
	// ConnectionTimeout bounds the handshake (TLS, then the HTTP/2 preface
	// and settings; default 10s): a connection that has not completed it is
	// closed. gRPC's default is 120s.
	ConnectionTimeout time.Duration
	// KeepaliveTime and KeepaliveTimeout: the server pings a connection
	// idle for KeepaliveTime (default 2m) and closes it when the ping is
	// not answered within KeepaliveTimeout (default 20s), so dead peers do
	// not hold streams.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest interval between a client's pings
	// (default 15s, with or without streams); a client pinging faster is
	// sent GOAWAY (ENHANCE_YOUR_CALM, "too_many_pings").
	KeepaliveMinTime time.Duration
	// MaxConnectionIdle closes (GOAWAY) a connection without streams for
	// this long (default 5m).
	MaxConnectionIdle time.Duration
	// MaxConnectionAge and MaxConnectionAgeGrace: see drain.* (0: none).
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

func (c ConnLimits) withDefaults() ConnLimits {
	if c.MaxHeaderListBytes <= 0 {
		c.MaxHeaderListBytes = 64 << 10
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.ConnectionTimeout, 10 * time.Second}, {&c.KeepaliveTime, 2 * time.Minute}, {&c.KeepaliveTimeout, 20 * time.Second},
		{&c.KeepaliveMinTime, 15 * time.Second}, {&c.MaxConnectionIdle, 5 * time.Minute}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	return c
}

// ServerOptions are the grpc.ServerOptions applying the limits.
func (c ConnLimits) ServerOptions() []grpc.ServerOption {
	c = c.withDefaults()
	return []grpc.ServerOption{
		grpc.MaxHeaderListSize(uint32(c.MaxHeaderListBytes)),
		grpc.ConnectionTimeout(c.ConnectionTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: c.KeepaliveTime, Timeout: c.KeepaliveTimeout, MaxConnectionIdle: c.MaxConnectionIdle,
			// gRPC jitters the age by ±10% and sends GOAWAY: clients
			// reconnect, through the Service, spreading over the relays
			// after a scale-out.
			MaxConnectionAge: c.MaxConnectionAge, MaxConnectionAgeGrace: c.MaxConnectionAgeGrace,
		}),
	}
}
