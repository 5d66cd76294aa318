// Package xdstypes registers, by importing them, the Envoy resource types the
// relay can decode: to validate upstream resources, to render REST-JSON, and
// to read the filesystem source. Types outside it are still relayed (checked
// at the wire level only). Import it for its side effect:
//
//	import _ "github.com/xds-relay/xds-relay/upstream/xdstypes"
package xdstypes

import (
	_ "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
)
