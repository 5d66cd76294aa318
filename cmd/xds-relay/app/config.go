package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/xds-relay/xds-relay/relay/identity"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/ruleerr"
)

// Config is the relay's configuration file. Every key, its default and its
// meaning are listed in docs/configuration.md.
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

	// AdminTokenFile, if set, holds the bearer token every admin endpoint
	// but /healthz, /readyz and /metrics requires.
	AdminTokenFile string `yaml:"admin_token_file"`
}

// DeltaConfig tunes what delta (incremental) clients are sent.
type DeltaConfig struct {
	// ParentRemovalWait bounds how long a Cluster's (Listener's) removal
	// waits for its endpoints' (route configuration's), which a delta
	// client holding both is told first; 0 never holds a removal.
	ParentRemovalWait time.Duration `yaml:"parent_removal_wait"`
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
}

// DrainConfig is how the relay hands its clients to its peers.
type DrainConfig struct {
	// Period: on SIGTERM the relay stops accepting, sends GOAWAY and gives
	// open streams this long to move before closing them.
	Period time.Duration `yaml:"period"`
	// MaxConnectionAge closes each client connection (with GOAWAY) after
	// about this long (gRPC adds ±10% jitter), so clients spread over the
	// relays after a scale-out; 0 disables it.
	MaxConnectionAge time.Duration `yaml:"max_connection_age"`
	// MaxConnectionAgeGrace is how long streams of an aged connection may
	// stay open after the GOAWAY.
	MaxConnectionAgeGrace time.Duration `yaml:"max_connection_age_grace"`
}

// RESTConfig is the REST-JSON polling listener (spec "REST-JSON polling").
type RESTConfig struct {
	// Listen is the HTTP address of POST /v3/discovery:TYPE; empty disables.
	Listen string `yaml:"listen"`
	// MaxHold bounds a long poll: a request whose version is current waits
	// up to this long for a change, then gets 304.
	MaxHold time.Duration `yaml:"max_hold"`
	// Plaintext serves REST as plain HTTP even with tls.cert_file set
	// (refused with tls.client_ca_file); otherwise REST uses the xDS
	// listener's TLS.
	Plaintext bool `yaml:"plaintext"`
}

// TracingConfig configures OpenTelemetry traces (off by default).
type TracingConfig struct {
	// OTLPEndpoint is the OTLP/gRPC collector HOST:PORT; empty disables.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio of upstream responses traced, 0 to 1.
	SampleRatio float64 `yaml:"sample_ratio"`
}

// UpstreamConfig is the control plane the relay subscribes to.
type UpstreamConfig struct {
	Address string `yaml:"address"`
	// Addresses are more control planes to fail over to, in order; the
	// relay uses the first that answers and moves on when it fails.
	Addresses []string          `yaml:"addresses"`
	TLS       UpstreamTLSConfig `yaml:"tls"`
	RelayID   string            `yaml:"relay_id"`
	Protocol  string            `yaml:"protocol"`
	// Versions is what clients are sent as versions: "content" (content
	// hashes, identical on every relay of a tier) or "upstream" (the
	// upstream's SotW version_info and delta resource versions).
	Versions string        `yaml:"versions"`
	Backoff  BackoffConfig `yaml:"backoff"`
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
	// classes, ended streams); MaxFieldBytes cuts each client-supplied field.
	ClientLinesPerSecond int `yaml:"client_lines_per_second"`
	MaxFieldBytes        int `yaml:"max_field_bytes"`
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
	// times (a chronic laggard); 0 never disconnects.
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
}

// DefaultConfig is the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		Listen: ":18000",
		Admin:  "127.0.0.1:19000",
		Upstream: UpstreamConfig{
			Protocol: "sotw",
			Versions: "content",
			Backoff:  BackoffConfig{Initial: 500 * time.Millisecond, Max: 30 * time.Second},
		},
		Source:      SourceConfig{}, // no dir: the embedded sample
		NodeClasses: NodeClassConfig{Linger: 5 * time.Minute},
		Log:         LogConfig{Level: "info", Format: "console", ClientLinesPerSecond: 20, MaxFieldBytes: 1024},
		Limits: LimitsConfig{MaxTypesPerStream: 64, MaxResourceNames: 100000, MaxStreams: 200000,
			MaxStreamsPerConnection: 100, MaxMessageBytes: 4 << 20, RequestsPerSecond: 100, RequestBurst: 200, MaxCollapses: 10,
			FirstRequestTimeout: 30 * time.Second, MaxTypeURLBytes: 256, MaxResourceNameBytes: 2048, MaxVersionBytes: 1024, MaxNodeBytes: 64 << 10,
			MaxNodeIDBytes: 1024, MaxClassNameBytes: 256, MaxMetricClasses: 256,
			MaxClassNamesPerType: 200000, MaxClassTypes: 64, MaxUpstreamRequestBytes: 3 << 20,
			MaxClasses: 10000},
		Server: ServerConfig{MaxHeaderListBytes: 64 << 10, ConnectionTimeout: 10 * time.Second, KeepaliveTime: 2 * time.Minute,
			KeepaliveTimeout: 20 * time.Second, KeepaliveMinTime: 15 * time.Second, MaxConnectionIdle: 5 * time.Minute},
		Drain:   DrainConfig{Period: 30 * time.Second, MaxConnectionAge: 30 * time.Minute, MaxConnectionAgeGrace: time.Minute},
		REST:    RESTConfig{MaxHold: 30 * time.Second},
		Tracing: TracingConfig{SampleRatio: 1},
		Delta:   DeltaConfig{ParentRemovalWait: 5 * time.Second},
	}
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

// LoadConfig reads and validates a configuration file over the defaults.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes data strictly: an unknown key, a value of the wrong
// type or an invalid value is an error naming the key and its line.
func ParseConfig(file string, data []byte) (Config, error) {
	cfg := DefaultConfig()
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return cfg, &ConfigError{File: file, Line: yamlErrLine(err), Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	lines := keyLines(&root)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// yaml.v3 decodes what it can past a wrong key or value, so the values
	// are checked too and every problem is reported at once.
	var errs ConfigErrors
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		errs = decodeError(file, err, lines)
	}
	reported := map[string]bool{}
	for _, ce := range errs {
		reported[ce.Key] = true
	}
	for _, ce := range asConfigErrors(cfg.Validate()) {
		if reported[ce.Key] {
			continue // the value was not decoded: the decode error says why
		}
		ce.File, ce.Line = file, lines.nearestLine(ce.Key)
		errs = append(errs, ce)
	}
	errs.sortByLine()
	return cfg, errs.orNil()
}

// Validate checks values and reports every problem it finds, not only the
// first: the error is a ConfigErrors of *ConfigError with Key set.
func (c *Config) Validate() error {
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
	if err := checkHostPort(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	if err := checkHostPort(c.Admin); err != nil {
		bad("admin", "%v", err)
	}
	if c.Upstream.Address != "" {
		if err := checkHostPort(c.Upstream.Address); err != nil {
			bad("upstream.address", "%v", err)
		}
	}
	if c.Upstream.Protocol != "sotw" && c.Upstream.Protocol != "delta" {
		bad("upstream.protocol", "must be sotw or delta, got %q", c.Upstream.Protocol)
	}
	if c.Upstream.Versions != "content" && c.Upstream.Versions != "upstream" {
		bad("upstream.versions", "must be content or upstream, got %q", c.Upstream.Versions)
	}
	if c.Upstream.Backoff.Initial <= 0 {
		bad("upstream.backoff.initial", "must be positive, got %v", c.Upstream.Backoff.Initial)
	}
	if c.Upstream.Backoff.Max < c.Upstream.Backoff.Initial {
		bad("upstream.backoff.max", "must be at least upstream.backoff.initial (%v), got %v", c.Upstream.Backoff.Initial, c.Upstream.Backoff.Max)
	}
	if _, err := c.classifier(); err != nil {
		badRule("node_classes", err)
	}
	if c.NodeClasses.Linger <= 0 {
		bad("node_classes.linger", "must be positive, got %v", c.NodeClasses.Linger)
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
	if c.Limits.MaxTypesPerStream < 1 {
		bad("limits.max_types_per_stream", "must be at least 1, got %d", c.Limits.MaxTypesPerStream)
	}
	if c.Limits.MaxResourceNames < 1 {
		bad("limits.max_resource_names", "must be at least 1, got %d", c.Limits.MaxResourceNames)
	}
	for _, lim := range []struct {
		key string
		v   int
	}{
		{"limits.max_streams", c.Limits.MaxStreams},
		{"limits.max_streams_per_connection", c.Limits.MaxStreamsPerConnection},
		{"limits.max_message_bytes", c.Limits.MaxMessageBytes},
		{"limits.request_burst", c.Limits.RequestBurst},
		{"limits.max_classes", c.Limits.MaxClasses},
		{"limits.max_type_url_bytes", c.Limits.MaxTypeURLBytes},
		{"limits.max_resource_name_bytes", c.Limits.MaxResourceNameBytes},
		{"limits.max_version_bytes", c.Limits.MaxVersionBytes},
		{"limits.max_node_bytes", c.Limits.MaxNodeBytes},
		{"limits.max_node_id_bytes", c.Limits.MaxNodeIDBytes},
		{"limits.max_class_name_bytes", c.Limits.MaxClassNameBytes},
		{"limits.max_metric_classes", c.Limits.MaxMetricClasses},
		{"server.max_header_list_bytes", c.Server.MaxHeaderListBytes},
		{"log.client_lines_per_second", c.Log.ClientLinesPerSecond},
		{"log.max_field_bytes", c.Log.MaxFieldBytes},
		{"limits.max_class_names_per_type", c.Limits.MaxClassNamesPerType},
		{"limits.max_class_types", c.Limits.MaxClassTypes},
		{"limits.max_upstream_request_bytes", c.Limits.MaxUpstreamRequestBytes},
	} {
		if lim.v < 1 {
			bad(lim.key, "must be at least 1, got %d", lim.v)
		}
	}
	if !(c.Limits.RequestsPerSecond > 0) || math.IsInf(c.Limits.RequestsPerSecond, 0) { // NaN fails too
		bad("limits.requests_per_second", "must be positive, got %v", c.Limits.RequestsPerSecond)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"limits.first_request_timeout", c.Limits.FirstRequestTimeout},
		{"server.connection_timeout", c.Server.ConnectionTimeout},
		{"server.keepalive_time", c.Server.KeepaliveTime},
		{"server.keepalive_timeout", c.Server.KeepaliveTimeout},
		{"server.keepalive_min_time", c.Server.KeepaliveMinTime},
		{"server.max_connection_idle", c.Server.MaxConnectionIdle},
	} {
		if d.v <= 0 {
			bad(d.key, "must be positive, got %v", d.v)
		}
	}
	if c.Server.MaxHeaderListBytes < 1024 {
		bad("server.max_header_list_bytes", "must be at least 1024 (a gRPC request's headers), got %d", c.Server.MaxHeaderListBytes)
	}
	if c.Log.MaxFieldBytes < 64 {
		bad("log.max_field_bytes", "must be at least 64, got %d", c.Log.MaxFieldBytes)
	}
	if c.Limits.MaxCollapses < 0 {
		bad("limits.max_collapses", "must not be negative (0: never disconnect), got %d", c.Limits.MaxCollapses)
	}
	if len(c.Upstream.Addresses) > 0 && c.Upstream.Address == "" {
		bad("upstream.addresses", "fallback control planes need the primary upstream.address")
	}
	for i, a := range c.Upstream.Addresses {
		if err := checkHostPort(a); err != nil {
			bad(fmt.Sprintf("upstream.addresses[%d]", i), "%v", err)
		}
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
	if c.Drain.Period < 0 {
		bad("drain.period", "must not be negative, got %v", c.Drain.Period)
	}
	if c.Drain.MaxConnectionAge < 0 {
		bad("drain.max_connection_age", "must not be negative (0 disables), got %v", c.Drain.MaxConnectionAge)
	}
	if c.Drain.MaxConnectionAgeGrace < 0 {
		bad("drain.max_connection_age_grace", "must not be negative, got %v", c.Drain.MaxConnectionAgeGrace)
	}
	if c.REST.Listen != "" {
		if err := checkHostPort(c.REST.Listen); err != nil {
			bad("rest.listen", "%v", err)
		}
	}
	if c.REST.MaxHold < 0 {
		bad("rest.max_hold", "must not be negative, got %v", c.REST.MaxHold)
	}
	if c.Delta.ParentRemovalWait < 0 {
		bad("delta.parent_removal_wait", "must not be negative (0: never hold), got %v", c.Delta.ParentRemovalWait)
	}
	if c.Tracing.OTLPEndpoint != "" {
		if err := checkHostPort(c.Tracing.OTLPEndpoint); err != nil {
			bad("tracing.otlp_endpoint", "%v", err)
		}
	}
	if !(c.Tracing.SampleRatio >= 0 && c.Tracing.SampleRatio <= 1) { // NaN fails too
		bad("tracing.sample_ratio", "must be between 0 and 1, got %v", c.Tracing.SampleRatio)
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
