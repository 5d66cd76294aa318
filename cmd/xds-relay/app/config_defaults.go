package app

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/relay"
	"github.com/xds-relay/xds-relay/upstream"
)

// setting is one configuration key's default. The rule is the same for
// every key: left out, or set to the zero value (0, 0s, ""), it takes its
// default. Keys that can be switched off say what a negative value does
// (off); for the others a negative value is an error.
type setting struct {
	key string // dotted path, as in the file
	// def is the default, of the field's Go type; nil for lists, which are
	// empty by default.
	def any
	// off is what a negative value does ("never disconnect"); empty when
	// the key cannot be switched off. Before the rule, 0 did this.
	off string
	// doc is how docs/configuration.md states a default computed at run
	// time ("per class"), in place of def.
	doc string
}

// settings is every key of the configuration file and its default: the one
// home of the defaults. DefaultConfig, the zero-means-default rule, the
// checks for negative values, the warnings for a 0 that used to switch a
// key off and the defaults in docs/configuration.md
// (TestDocsDefaultsMatchCode) all follow it.
var settings = []setting{
	{key: "listen", def: ":18000"},
	{key: "admin", def: "127.0.0.1:19000"},
	{key: "admin_token_file", def: ""},

	{key: "upstream.address", def: ""},
	{key: "upstream.fallbacks"},
	{key: "upstream.tls.ca_file", def: ""},
	{key: "upstream.tls.cert_file", def: ""},
	{key: "upstream.tls.key_file", def: ""},
	{key: "upstream.tls.server_name", def: ""},
	{key: "upstream.relay_id", def: "", doc: "per class"},
	{key: "upstream.protocol", def: "sotw"},
	{key: "upstream.versions", def: "content"},
	{key: "upstream.ask", def: "names"},
	{key: "upstream.wildcard", def: "every_resource"},
	{key: "upstream.backoff.initial", def: upstream.DefaultBackoff.Initial},
	{key: "upstream.backoff.max", def: upstream.DefaultBackoff.Max},
	{key: "upstream.stream_window", def: int(upstream.DefaultStreamWindow)},
	{key: "upstream.connection_window", def: int(upstream.DefaultConnWindow)},
	{key: "upstream.max_message_bytes", def: upstream.DefaultMaxMessageBytes},
	{key: "upstream.max_connections", def: upstream.DefaultMaxConnections},
	{key: "upstream.resync_interval", def: upstream.DefaultResyncInterval, off: "keep a healthy stream for good"},
	{key: "upstream.connect_timeout", def: upstream.DefaultConnectTimeout},
	{key: "upstream.unavailable_after", def: upstream.DefaultUnavailableAfter, off: "never tell clients the upstream is unreachable"},
	{key: "upstream.affinity", def: "none"},
	{key: "upstream.affinity_replicas", def: 1},
	{key: "upstream.members"},
	{key: "upstream.resolve_interval", def: upstream.DefaultResolveInterval},

	{key: "source.dir", def: ""},
	{key: "node_classes.rules"},
	{key: "node_classes.linger", def: 5 * time.Minute},

	{key: "log.level", def: "info"},
	{key: "log.format", def: "console"},
	{key: "log.client_lines_per_second", def: 20},
	{key: "log.upstream_lines_per_second", def: upstream.DefaultUpstreamLinesPerSecond},
	{key: "log.max_field_bytes", def: 1024},

	{key: "limits.max_types_per_stream", def: 64},
	{key: "limits.max_resource_names", def: 100000},
	{key: "limits.max_streams", def: 200000},
	{key: "limits.max_streams_per_connection", def: 100},
	{key: "limits.max_message_bytes", def: 4 << 20},
	{key: "limits.requests_per_second", def: 100.0},
	{key: "limits.request_burst", def: 200},
	{key: "limits.max_collapses", def: 10, off: "never disconnect a slow client"},
	{key: "limits.first_request_timeout", def: 30 * time.Second},
	{key: "limits.max_type_url_bytes", def: 256},
	{key: "limits.max_resource_name_bytes", def: 2048},
	{key: "limits.max_version_bytes", def: 1024},
	{key: "limits.max_node_bytes", def: 64 << 10},
	{key: "limits.max_node_id_bytes", def: 1024},
	{key: "limits.max_class_name_bytes", def: 256},
	{key: "limits.max_metric_classes", def: 256},
	{key: "limits.max_class_names_per_type", def: 200000},
	{key: "limits.max_class_types", def: 64},
	{key: "limits.max_upstream_request_bytes", def: 3 << 20},
	{key: "limits.max_classes", def: 10000},
	{key: "limits.max_streams_per_peer", def: 0, off: "no per-peer share", doc: "a tenth of `limits.max_streams`"},
	{key: "limits.max_connections_per_peer", def: 0, off: "no per-peer share", doc: "a tenth of `server.max_connections`"},
	{key: "limits.new_classes_per_peer", def: 0, off: "no per-peer share", doc: "a tenth of `limits.max_classes`"},
	{key: "limits.new_classes_window", def: 5 * time.Minute},
	{key: "limits.streams_per_peer_per_second", def: 1.0, off: "no per-peer rate"},
	{key: "limits.streams_per_peer_burst", def: 500},
	{key: "limits.trusted_peers"},
	{key: "limits.max_peers", def: 65536, off: "no cap on the peer table"},

	{key: "server.max_header_list_bytes", def: 64 << 10},
	{key: "server.connection_timeout", def: 10 * time.Second},
	{key: "server.keepalive_time", def: 2 * time.Minute},
	{key: "server.keepalive_timeout", def: 20 * time.Second},
	{key: "server.keepalive_min_time", def: 15 * time.Second},
	{key: "server.max_connection_idle", def: 5 * time.Minute},
	{key: "server.allow_compressed_requests", def: false},
	{key: "server.max_connections", def: 0, off: "no cap", doc: "the fd limit (`RLIMIT_NOFILE`) less `server.reserved_fds`"},
	{key: "server.reserved_fds", def: 256},

	{key: "drain.period", def: 30 * time.Second, off: "end every stream at once"},
	{key: "drain.max_connection_age", def: 30 * time.Minute, off: "never close a connection for its age"},
	{key: "drain.max_connection_age_grace", def: time.Minute, off: "never cut the streams of an aged connection"},

	{key: "rest.listen", def: ""},
	{key: "rest.max_hold", def: 30 * time.Second, off: "answer every poll at once"},
	{key: "rest.plaintext", def: false},
	{key: "rest.idle_timeout", def: time.Minute},
	{key: "rest.read_timeout", def: relay.DefaultRESTReadTimeout},
	{key: "rest.max_held_polls", def: relay.DefaultMaxHeldPolls},

	{key: "tracing.otlp_endpoint", def: ""},
	{key: "tracing.sample_ratio", def: 1.0, off: "trace nothing"},

	{key: "tls.cert_file", def: ""},
	{key: "tls.key_file", def: ""},
	{key: "tls.client_ca_file", def: ""},
	{key: "tls.allow_secrets_without_client_cert", def: false},
	{key: "identity.rules"},

	{key: "delta.parent_removal_wait", def: relay.DefaultParentRemovalWait, off: "never hold a removal"},

	{key: "load_reporting.max_streams", def: relay.DefaultLoadMaxStreams},
	{key: "load_reporting.reports_per_second", def: relay.DefaultLoadReportsPerSecond},
	{key: "load_reporting.report_burst", def: relay.DefaultLoadReportBurst},
	{key: "load_reporting.max_clusters_per_report", def: relay.DefaultLoadMaxClustersPerReport},
	{key: "load_reporting.max_stats_per_report", def: relay.DefaultLoadMaxStatsPerReport},
	{key: "load_reporting.max_class_report_bytes", def: relay.DefaultLoadMaxClassReportBytes},

	{key: "overload.memory_budget_bytes", def: 0, off: "have no memory ceiling", doc: "GOMEMLIMIT, else the container's memory limit, else none"},
	{key: "overload.shed_ratio", def: 0.8},
	{key: "overload.refuse_ratio", def: 0.9},
	{key: "overload.interval", def: time.Second},
}

// deprecatedKeys are old names still accepted, with the key that replaced
// them. A file using one is warned.
var deprecatedKeys = map[string]string{"upstream.addresses": "upstream.fallbacks"}

// DefaultConfig is the configuration with every default filled in.
func DefaultConfig() Config {
	var c Config
	c.applyDefaults()
	return c
}

// applyDefaults gives every key left at its zero value its default, and
// moves the deprecated upstream.addresses to upstream.fallbacks when only it
// is set.
func (c *Config) applyDefaults() {
	v := reflect.ValueOf(c).Elem()
	for _, s := range settings {
		if s.def == nil {
			continue
		}
		if f := fieldOf(v, s.key); f.IsZero() {
			f.Set(reflect.ValueOf(s.def))
		}
	}
	if len(c.Upstream.Fallbacks) == 0 {
		c.Upstream.Fallbacks, c.Upstream.DeprecatedAddresses = c.Upstream.DeprecatedAddresses, nil
	}
}

// fieldOf is the field of v (a Config) at a dotted key, following the yaml
// tags. It panics on a key Config does not have: settings is checked by
// TestSettingsCoverConfig.
func fieldOf(v reflect.Value, key string) reflect.Value {
	for _, name := range strings.Split(key, ".") {
		t := v.Type()
		found := false
		for i := 0; i < t.NumField(); i++ {
			if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			panic(fmt.Sprintf("app: no configuration key %q", key))
		}
	}
	return v
}

// checkNegatives reports a negative value of a key that cannot be switched
// off.
func (c *Config) checkNegatives(bad func(key, format string, args ...any)) {
	v := reflect.ValueOf(c).Elem()
	for _, s := range settings {
		if s.off != "" || s.def == nil {
			continue
		}
		f := fieldOf(v, s.key)
		switch def := s.def.(type) {
		case time.Duration:
			if d := time.Duration(f.Int()); d < 0 {
				bad(s.key, "must be positive, got %v (0 or unset: the default, %v)", d, def)
			}
		case int:
			if n := f.Int(); n < 0 {
				bad(s.key, "must be at least 1, got %d (0 or unset: the default, %d)", n, def)
			}
		case float64:
			if x := f.Float(); x < 0 {
				bad(s.key, "must be positive, got %v (0 or unset: the default, %v)", x, def)
			}
		}
	}
}

// offIfNegative is v, or 0 for a negative v: a key switched off, for the
// libraries whose 0 means off.
func offIfNegative[T int | float64 | time.Duration](v T) T { return max(v, 0) }
