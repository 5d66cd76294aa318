package app

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/relay/identity"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/ruleerr"
)

// Config is the relay's configuration file. Every key, its default and its
// meaning are listed in docs/configuration.md; the defaults are in settings
// (config_defaults.go). A key left at its zero value takes its default; a
// negative value switches off the keys that can be off.
type Config struct {
	Listen      string          `yaml:"listen"`
	Admin       string          `yaml:"admin"`
	Upstream    UpstreamConfig  `yaml:"upstream"`
	Source      SourceConfig    `yaml:"source"`
	NodeClasses NodeClassConfig `yaml:"node_classes"`
	Log         LogConfig       `yaml:"log"`
	Limits      LimitsConfig    `yaml:"limits"`
	Server      ServerConfig    `yaml:"server"`
	Drain       DrainConfig     `yaml:"drain"`
	REST        RESTConfig      `yaml:"rest"`
	Tracing     TracingConfig   `yaml:"tracing"`
	TLS         TLSConfig       `yaml:"tls"`
	Identity    IdentityConfig  `yaml:"identity"`
	Delta       DeltaConfig     `yaml:"delta"`
	Overload    OverloadConfig  `yaml:"overload"`
	// LoadReporting bounds the clients' load reports, which the relay
	// forwards to the control plane (relay.LoadLimits).
	LoadReporting LoadReportingConfig `yaml:"load_reporting"`

	// AdminTokenFile, if set, holds the bearer token every admin endpoint
	// but /healthz, /readyz and /metrics requires.
	AdminTokenFile string `yaml:"admin_token_file"`
}

// DeltaConfig tunes what delta (incremental) clients are sent.
type DeltaConfig struct {
	// ParentRemovalWait bounds how long a removal waits for what makes it
	// safe (docs/architecture.md, "Removal order"): a Cluster's
	// (Listener's) for its endpoints' (route configuration's), which a
	// delta client holding both is told first; a Cluster's, for any
	// client, for the route or Listener change that stops referring to it.
	// Negative never holds a removal.
	ParentRemovalWait time.Duration `yaml:"parent_removal_wait"`
}

// LoadReportingConfig bounds what load-reporting clients
// (LoadReportingService) can make the relay hold and do; see
// relay.LoadLimits.
type LoadReportingConfig struct {
	// MaxStreams bounds the concurrent load-report streams.
	MaxStreams int `yaml:"max_streams"`
	// ReportsPerSecond and ReportBurst rate-limit each stream's reports
	// (at least twice per interval the control plane asks for).
	ReportsPerSecond float64 `yaml:"reports_per_second"`
	ReportBurst      int     `yaml:"report_burst"`
	// MaxClustersPerReport and MaxStatsPerReport bound one report: its
	// clusters, and the localities, endpoints, load metrics and drop
	// categories below them.
	MaxClustersPerReport int `yaml:"max_clusters_per_report"`
	MaxStatsPerReport    int `yaml:"max_stats_per_report"`
	// MaxClassReportBytes bounds the estimated encoded size of one class's
	// report upstream.
	MaxClassReportBytes int `yaml:"max_class_report_bytes"`
}

// OverloadConfig is the relay's memory ceiling (package overload).
type OverloadConfig struct {
	// MemoryBudgetBytes is the budget the marks are parts of; 0 takes
	// GOMEMLIMIT, else the container's (cgroup) memory limit, else none;
	// negative: no ceiling.
	MemoryBudgetBytes int `yaml:"memory_budget_bytes"`
	// ShedRatio: at this part of the budget, lingering classes and shards
	// are shed, oldest first. RefuseRatio: at this part, new streams and
	// subscriptions are refused.
	ShedRatio   float64 `yaml:"shed_ratio"`
	RefuseRatio float64 `yaml:"refuse_ratio"`
	// Interval is the time between two readings of the heap.
	Interval time.Duration `yaml:"interval"`
}

// TLSConfig is the downstream listener's TLS. Files are reloaded when they
// change.
type TLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, if set, makes the listener require and verify client
	// certificates (mTLS) against these CAs.
	ClientCAFile string `yaml:"client_ca_file"`
	// AllowSecretsWithoutClientCert serves Secrets (SDS) to clients without
	// a verified client certificate; otherwise they are refused.
	AllowSecretsWithoutClientCert bool `yaml:"allow_secrets_without_client_cert"`
}

// IdentityConfig binds client certificate identities to the nodes they may
// claim (requires tls.client_ca_file).
type IdentityConfig struct {
	Rules []IdentityRule `yaml:"rules"`
}

// IdentityRule: a client whose certificate has a SAN (URI, e.g. a SPIFFE ID,
// or DNS name) matching SAN may claim node ids matching NodeID and classes
// matching Class. $1, ${name} in NodeID and Class expand SAN's groups.
type IdentityRule struct {
	SAN    string `yaml:"san"`
	NodeID string `yaml:"node_id"`
	Class  string `yaml:"class"`
}

// UpstreamTLSConfig is the TLS to the control plane (none when all empty).
type UpstreamTLSConfig struct {
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

// ServerConfig is the downstream gRPC server's connection limits (see
// relay.ConnLimits).
type ServerConfig struct {
	MaxHeaderListBytes int           `yaml:"max_header_list_bytes"`
	ConnectionTimeout  time.Duration `yaml:"connection_timeout"`
	KeepaliveTime      time.Duration `yaml:"keepalive_time"`
	KeepaliveTimeout   time.Duration `yaml:"keepalive_timeout"`
	KeepaliveMinTime   time.Duration `yaml:"keepalive_min_time"`
	MaxConnectionIdle  time.Duration `yaml:"max_connection_idle"`
	// AllowCompressedRequests accepts gzip-compressed gRPC messages and REST
	// bodies (inflated within limits.max_message_bytes and the REST body
	// limit); otherwise they are refused (gRPC UNIMPLEMENTED, REST 415).
	AllowCompressedRequests bool `yaml:"allow_compressed_requests"`
	// MaxConnections caps the connections of the xDS and REST listeners
	// together (relay.ConnGate); 0: the fd limit less ReservedFDs, which
	// stay for the admin port, the upstream connections and the files;
	// negative: no cap.
	MaxConnections int `yaml:"max_connections"`
	ReservedFDs    int `yaml:"reserved_fds"`
}

// DrainConfig is how the relay hands its clients to its peers.
type DrainConfig struct {
	// Period: on SIGTERM the relay stops accepting, sends GOAWAY and gives
	// open streams this long to move before closing them.
	Period time.Duration `yaml:"period"`
	// MaxConnectionAge closes each client connection (with GOAWAY) after
	// about this long (gRPC adds ±10% jitter), so clients spread over the
	// relays after a scale-out; negative disables it.
	MaxConnectionAge time.Duration `yaml:"max_connection_age"`
	// MaxConnectionAgeGrace is how long streams of an aged connection may
	// stay open after the GOAWAY; negative: as long as they last.
	MaxConnectionAgeGrace time.Duration `yaml:"max_connection_age_grace"`
}

// RESTConfig is the REST-JSON polling listener (spec "REST-JSON polling").
type RESTConfig struct {
	// Listen is the HTTP address of POST /v3/discovery:TYPE; empty disables.
	Listen string `yaml:"listen"`
	// MaxHold bounds a long poll: a request whose version is current waits
	// up to this long for a change, then gets 304; negative answers at
	// once.
	MaxHold time.Duration `yaml:"max_hold"`
	// IdleTimeout closes a keep-alive connection without a request for
	// this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ReadTimeout bounds the arrival of a request's headers, and then of
	// its body (408 past it); a held poll is not cut by it.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// MaxHeldPolls bounds the polls held at once; one more that would be
	// held gets 429.
	MaxHeldPolls int `yaml:"max_held_polls"`
	// Plaintext serves REST as plain HTTP even with tls.cert_file set
	// (refused with tls.client_ca_file); otherwise REST uses the xDS
	// listener's TLS.
	Plaintext bool `yaml:"plaintext"`
}

// TracingConfig configures OpenTelemetry traces (off by default).
type TracingConfig struct {
	// OTLPEndpoint is the OTLP/gRPC collector HOST:PORT; empty disables.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio of upstream responses traced, up to 1; negative traces
	// nothing.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// UpstreamConfig is the control plane the relay subscribes to.
type UpstreamConfig struct {
	Address string `yaml:"address"`
	// Fallbacks are more control planes to fail over to, in order after
	// Address; the relay uses the first that answers and moves on when it
	// fails.
	Fallbacks []string `yaml:"fallbacks"`
	// DeprecatedAddresses is the old name of Fallbacks (key
	// upstream.addresses), still accepted with a warning.
	DeprecatedAddresses []string          `yaml:"addresses,omitempty"`
	TLS                 UpstreamTLSConfig `yaml:"tls"`
	RelayID             string            `yaml:"relay_id"`
	Protocol            string            `yaml:"protocol"`
	// Versions is what clients are sent as versions: "content" (content
	// hashes, identical on every relay of a tier) or "upstream" (the
	// upstream's SotW version_info and delta resource versions).
	Versions string `yaml:"versions"`
	// Ask is how each type is asked for: "names" (the names clients
	// subscribe to) or "wildcard" (every resource of the type, names
	// selected in the relay), for control planes that answer a named
	// request only when it names all their resources.
	Ask string `yaml:"ask"`
	// Wildcard is what the control plane's wildcard stands for:
	// "every_resource" (go-control-plane, istiod) or "site_specific" (a
	// set of its choosing, names beside it asked too; shard.WildcardScope).
	Wildcard string        `yaml:"wildcard"`
	Backoff  BackoffConfig `yaml:"backoff"`
	// StreamWindow and ConnectionWindow are the upstream connection's
	// fixed HTTP/2 flow-control windows in bytes (upstream.Config).
	StreamWindow     int `yaml:"stream_window"`
	ConnectionWindow int `yaml:"connection_window"`
	// MaxMessageBytes is the largest upstream response accepted
	// (upstream.Config.MaxMessageBytes).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxConnections caps the upstream connections
	// (upstream.Config.MaxConnections).
	MaxConnections int `yaml:"max_connections"`
	// ResyncInterval is how long, on average, a class's upstream stream
	// lives before a new one reconciles the class with the control plane
	// (upstream.Config.Resync); negative: never.
	ResyncInterval time.Duration `yaml:"resync_interval"`
	// ConnectTimeout bounds an upstream connection attempt
	// (upstream.Config.ConnectTimeout).
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// UnavailableAfter: a class whose upstream is unreachable this long
	// tells the clients it has nothing for UNAVAILABLE, so they use another
	// xDS server (upstream.Config.UnavailableAfter); negative: never.
	UnavailableAfter time.Duration `yaml:"unavailable_after"`
	// Affinity is "none" (every class to upstream.address) or "class"
	// (each class to one member of the tier upstream.address names,
	// upstream.Config.Affinity).
	Affinity string `yaml:"affinity"`
	// AffinityReplicas is how many members each class goes to; only 1.
	AffinityReplicas int `yaml:"affinity_replicas"`
	// Members are the tier's HOST:PORTs; empty: what upstream.address
	// resolves to (upstream.Config.Members).
	Members []string `yaml:"members"`
	// ResolveInterval is how often upstream.address is resolved again for
	// the members (upstream.Config.ResolveInterval).
	ResolveInterval time.Duration `yaml:"resolve_interval"`
}

// BackoffConfig paces reconnection to the upstream.
type BackoffConfig struct {
	Initial time.Duration `yaml:"initial"`
	Max     time.Duration `yaml:"max"`
}

// SourceConfig is the filesystem source used when no upstream is set.
type SourceConfig struct {
	// Dir is the directory of resource files to serve and watch; empty
	// serves the sample embedded in the binary (deploy/sample-config).
	Dir string `yaml:"dir"`
}

// NodeClassConfig holds the rules mapping nodes to classes.
type NodeClassConfig struct {
	Rules []RuleConfig `yaml:"rules"`
	// Linger is how long a class whose clients all left keeps its upstream
	// stream and state before it is dropped.
	Linger time.Duration `yaml:"linger"`
}

// RuleConfig is one node-class rule (see shard.Rule).
type RuleConfig struct {
	Field string `yaml:"field"`
	Regex string `yaml:"regex"`
	Class string `yaml:"class"`
}

// LogConfig configures logging.
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
	// ClientLinesPerSecond bounds the log lines clients trigger (NACKs, new
	// classes, ended streams), UpstreamLinesPerSecond the warnings the
	// control plane's messages cause (NACKs, unsolicited pushes, failed
	// streams); MaxFieldBytes cuts each client- or upstream-supplied field.
	ClientLinesPerSecond   int `yaml:"client_lines_per_second"`
	UpstreamLinesPerSecond int `yaml:"upstream_lines_per_second"`
	MaxFieldBytes          int `yaml:"max_field_bytes"`
}

// LimitsConfig bounds what one client may ask for.
type LimitsConfig struct {
	MaxTypesPerStream int `yaml:"max_types_per_stream"`
	MaxResourceNames  int `yaml:"max_resource_names"`
	// MaxStreams bounds the relay's concurrent client streams; more are
	// refused with RESOURCE_EXHAUSTED.
	MaxStreams int `yaml:"max_streams"`
	// MaxStreamsPerConnection bounds concurrent streams on one connection.
	MaxStreamsPerConnection int `yaml:"max_streams_per_connection"`
	// MaxMessageBytes bounds one request message.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// RequestsPerSecond and RequestBurst rate-limit each stream's requests;
	// excess ends the stream with RESOURCE_EXHAUSTED.
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	RequestBurst      int     `yaml:"request_burst"`
	// MaxCollapses disconnects a client whose queue overflowed this many
	// times (a chronic laggard); negative never disconnects.
	MaxCollapses int `yaml:"max_collapses"`
	// FirstRequestTimeout ends a stream that sends no request within it.
	FirstRequestTimeout time.Duration `yaml:"first_request_timeout"`
	// Input bounds (see relay.Options).
	MaxTypeURLBytes      int `yaml:"max_type_url_bytes"`
	MaxResourceNameBytes int `yaml:"max_resource_name_bytes"`
	MaxVersionBytes      int `yaml:"max_version_bytes"`
	MaxNodeBytes         int `yaml:"max_node_bytes"`
	MaxNodeIDBytes       int `yaml:"max_node_id_bytes"`
	MaxClassNameBytes    int `yaml:"max_class_name_bytes"`
	// MaxMetricClasses: class label values beyond this many fold into
	// "other".
	MaxMetricClasses int `yaml:"max_metric_classes"`
	// A node class's union subscription (shard.Limits): names per type, type
	// URLs, and the estimated size of its upstream request for one type. A
	// client that would push its class past one is refused.
	MaxClassNamesPerType    int `yaml:"max_class_names_per_type"`
	MaxClassTypes           int `yaml:"max_class_types"`
	MaxUpstreamRequestBytes int `yaml:"max_upstream_request_bytes"`
	// MaxClasses bounds the node classes (each has an upstream stream); a
	// client that would create one more is refused with RESOURCE_EXHAUSTED.
	MaxClasses int `yaml:"max_classes"`
	// Each peer's share of the limits (relay.PeerLimits): 0 takes a tenth
	// of the global limit, negative switches the share off.
	MaxStreamsPerPeer     int           `yaml:"max_streams_per_peer"`
	MaxConnectionsPerPeer int           `yaml:"max_connections_per_peer"`
	NewClassesPerPeer     int           `yaml:"new_classes_per_peer"`
	NewClassesWindow      time.Duration `yaml:"new_classes_window"`
	// StreamsPerPeerPerSecond and StreamsPerPeerBurst rate-limit each
	// peer's new streams (negative rate: none).
	StreamsPerPeerPerSecond float64 `yaml:"streams_per_peer_per_second"`
	StreamsPerPeerBurst     int     `yaml:"streams_per_peer_burst"`
	// MaxPeers bounds the per-peer table (negative: no cap).
	MaxPeers int `yaml:"max_peers"`
	// TrustedPeers are CIDR prefixes (or addresses) whose clients take no
	// per-peer share: the relays of a tier below, a load balancer that
	// hides the clients' addresses.
	TrustedPeers []string `yaml:"trusted_peers"`
}

// ConfigError is a configuration problem at a key (dotted path) and line.
type ConfigError struct {
	File string
	Line int // 0 when unknown (the key is absent from the file)
	Key  string
	Msg  string
}

func (e *ConfigError) Error() string {
	var parts []string
	if e.File != "" {
		loc := e.File
		if e.Line > 0 {
			loc += ":" + strconv.Itoa(e.Line)
		}
		parts = append(parts, loc)
	}
	if e.Key != "" {
		parts = append(parts, e.Key)
	}
	return strings.Join(append(parts, e.Msg), ": ")
}

// Validate checks values and reports every problem it finds, not only the
// first: the error is a ConfigErrors of *ConfigError with Key set. Keys at
// their zero value are checked as their defaults, which they take.
func (c *Config) Validate() error {
	d := *c
	d.applyDefaults()
	return d.validate()
}

// validate is Validate of a configuration whose defaults are applied.
func (c *Config) validate() error {
	var errs ConfigErrors
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	// badRule reports a rule list's error at the rule's key
	// (section.rules[i].field) when it names one.
	badRule := func(section string, err error) {
		var re *ruleerr.RuleError
		if errors.As(err, &re) {
			bad(fmt.Sprintf("%s.rules[%d].%s", section, re.Index, re.Field), "%v", re.Err)
		} else {
			bad(section+".rules", "%v", err)
		}
	}
	c.checkNegatives(bad)
	for _, a := range []struct{ key, addr string }{
		{"listen", c.Listen},
		{"admin", c.Admin},
		{"upstream.address", c.Upstream.Address},
		{"rest.listen", c.REST.Listen},
		{"tracing.otlp_endpoint", c.Tracing.OTLPEndpoint},
	} {
		if a.addr == "" {
			continue // optional, off when empty
		}
		if err := checkHostPort(a.addr); err != nil {
			bad(a.key, "%v", err)
		}
	}
	if c.Upstream.Protocol != "sotw" && c.Upstream.Protocol != "delta" {
		bad("upstream.protocol", "must be sotw or delta, got %q", c.Upstream.Protocol)
	}
	if c.Upstream.Versions != "content" && c.Upstream.Versions != "upstream" {
		bad("upstream.versions", "must be content or upstream, got %q", c.Upstream.Versions)
	}
	if c.Upstream.Ask != "names" && c.Upstream.Ask != "wildcard" {
		bad("upstream.ask", "must be names or wildcard, got %q", c.Upstream.Ask)
	}
	switch {
	case c.Upstream.Wildcard != "every_resource" && c.Upstream.Wildcard != "site_specific":
		bad("upstream.wildcard", "must be every_resource or site_specific, got %q", c.Upstream.Wildcard)
	case c.Upstream.Wildcard == "site_specific" && c.Upstream.Ask == "wildcard":
		// Asking the wildcard alone would never ask the names outside it.
		bad("upstream.wildcard", "site_specific needs upstream.ask: names (a site-specific wildcard does not cover every name)")
	}
	for _, w := range []struct {
		key string
		v   int
	}{{"upstream.stream_window", c.Upstream.StreamWindow}, {"upstream.connection_window", c.Upstream.ConnectionWindow}} {
		if w.v < minWindow || w.v > math.MaxInt32 {
			bad(w.key, "must be %d (64 KiB, HTTP/2's least) to %d bytes, got %d", minWindow, math.MaxInt32, w.v)
		}
	}
	if c.Upstream.MaxMessageBytes < minWindow || c.Upstream.MaxMessageBytes > math.MaxInt32/2 {
		bad("upstream.max_message_bytes", "must be %d to %d bytes, got %d", minWindow, math.MaxInt32/2, c.Upstream.MaxMessageBytes)
	}
	if c.Upstream.MaxConnections < 1 {
		bad("upstream.max_connections", "must be at least 1, got %d", c.Upstream.MaxConnections)
	}
	if c.Upstream.Backoff.Max < c.Upstream.Backoff.Initial {
		bad("upstream.backoff.max", "must be at least upstream.backoff.initial (%v), got %v", c.Upstream.Backoff.Initial, c.Upstream.Backoff.Max)
	}
	if len(c.Upstream.DeprecatedAddresses) > 0 {
		bad("upstream.addresses", "the old name of upstream.fallbacks, which is set too: keep only upstream.fallbacks")
	}
	if len(c.Upstream.Fallbacks) > 0 && c.Upstream.Address == "" {
		bad("upstream.fallbacks", "fallback control planes need the primary upstream.address")
	}
	for i, a := range c.Upstream.Fallbacks {
		if err := checkHostPort(a); err != nil {
			bad(fmt.Sprintf("upstream.fallbacks[%d]", i), "%v", err)
		}
	}
	c.validateAffinity(bad)
	if _, err := c.classifier(); err != nil {
		badRule("node_classes", err)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "console", "json":
	default:
		bad("log.format", "must be console or json, got %q", c.Log.Format)
	}
	if math.IsNaN(c.Limits.RequestsPerSecond) || math.IsInf(c.Limits.RequestsPerSecond, 1) {
		bad("limits.requests_per_second", "must be a positive number, got %v", c.Limits.RequestsPerSecond)
	}
	for i, t := range c.Limits.TrustedPeers {
		if _, err := parsePeerPrefix(t); err != nil {
			bad(fmt.Sprintf("limits.trusted_peers[%d]", i), "%v", err)
		}
	}
	if x := c.Limits.StreamsPerPeerPerSecond; math.IsNaN(x) || math.IsInf(x, 0) {
		bad("limits.streams_per_peer_per_second", "must be a number (negative: no per-peer rate), got %v", x)
	}
	if n := c.Server.MaxHeaderListBytes; 0 < n && n < 1024 {
		bad("server.max_header_list_bytes", "must be at least 1024 (a gRPC request's headers), got %d", n)
	}
	if n := c.Log.MaxFieldBytes; 0 < n && n < 64 {
		bad("log.max_field_bytes", "must be at least 64, got %d", n)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls.key_file", "tls.cert_file and tls.key_file go together")
	}
	if c.TLS.ClientCAFile != "" && c.TLS.CertFile == "" {
		bad("tls.client_ca_file", "mTLS needs the listener's own tls.cert_file and tls.key_file")
	}
	if len(c.Identity.Rules) > 0 && c.TLS.ClientCAFile == "" {
		bad("identity.rules", "binding node identities needs client certificates: set tls.client_ca_file")
	}
	if c.REST.Listen != "" && c.REST.Plaintext && c.TLS.ClientCAFile != "" {
		// Plain HTTP has no client certificates: it would serve any node,
		// and bypass identity binding, while gRPC requires them.
		bad("rest.plaintext", "REST in plaintext while the xDS listener requires client certificates (tls.client_ca_file): remove rest.plaintext")
	}
	if _, err := c.binder(); err != nil {
		badRule("identity", err)
	}
	if (c.Upstream.TLS.CertFile == "") != (c.Upstream.TLS.KeyFile == "") {
		bad("upstream.tls.key_file", "upstream.tls.cert_file and upstream.tls.key_file go together")
	}
	c.validateOverload(bad)
	if !(c.Tracing.SampleRatio <= 1) { // NaN fails too
		bad("tracing.sample_ratio", "must be at most 1 (negative: trace nothing), got %v", c.Tracing.SampleRatio)
	}
	return errs.orNil()
}

func (c *Config) classifier() (*shard.Classifier, error) {
	rules := make([]shard.Rule, len(c.NodeClasses.Rules))
	for i, r := range c.NodeClasses.Rules {
		if r.Field == "" {
			return nil, ruleerr.New(i, "field", errors.New("required"))
		}
		rules[i] = shard.Rule{Field: r.Field, Regex: r.Regex, Class: r.Class}
	}
	return shard.NewClassifier(rules)
}

// binder compiles the identity rules.
func (c *Config) binder() (*identity.Binder, error) {
	rules := make([]identity.Rule, len(c.Identity.Rules))
	for i, r := range c.Identity.Rules {
		rules[i] = identity.Rule{SAN: r.SAN, NodeID: r.NodeID, Class: r.Class}
	}
	return identity.NewBinder(rules)
}

func checkHostPort(addr string) error {
	if addr == "" {
		return errors.New("required (HOST:PORT)")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("not HOST:PORT: %v", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// minWindow is the least HTTP/2 flow-control window gRPC takes (it
// ignores a smaller one).
const minWindow = 64 << 10
