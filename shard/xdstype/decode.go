package xdstype

// The messages the relay decodes nested in registered resources (as
// typed_config): validation decodes a Listener's connection managers, and
// protojson (REST-JSON, the file source) must resolve every Any it meets.
// A resource holding another type is relayed as it is, but a REST response
// holding it answers 500 and a file holding it is a load error.
import (
	_ "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)
