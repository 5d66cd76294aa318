package upstream

// This file bounds what the control plane can put into the relay's log, its
// status and its NACKs. Every value an upstream message carries (a resource
// name, a type URL, a version, a status's text) is the upstream's to
// choose, megabytes included, and a misbehaving upstream can make the relay
// NACK or drop as fast as it sends: as for client-triggered lines
// (shard/clientlog), upstream-caused warnings pass one gate shared by every
// class stream, which lets a bounded rate through and counts the rest
// ("suppressed" on the next line), and each upstream value is cut to a
// bounded length with its length noted.

import (
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/xds-relay/xds-relay/shard/clientlog"
	"github.com/xds-relay/xds-relay/shard/drop"
)

// The upstream log gate's bounds when Config.LogGate is nil (the app's
// log.upstream_lines_per_second and log.max_field_bytes).
const (
	DefaultUpstreamLinesPerSecond = 20
	DefaultUpstreamFieldBytes     = 1024
)

// reasonFieldBytes bounds each upstream value a NACK reason quotes (a
// resource name, a type, an error's text), length noted: the reason goes
// back upstream as error_detail, to the log and to /debug/upstream, and
// stays useful (what is wrong, with which resource) at a few hundred bytes.
// A reason is its fixed text and at most three such values.
const reasonFieldBytes = 256

// warn logs an upstream-caused warning if the gate lets it through, with
// the count of those it suppressed since the last.
func (s *classStream) warn(msg string, fields ...zap.Field) {
	ok, suppressed := s.gate.Allow()
	if !ok {
		return
	}
	s.log.Warn(msg, append(fields, suppressed)...)
}

// field is a log field holding an upstream value, cut to the gate's bound.
func (s *classStream) field(key, v string) zap.Field { return s.gate.String(key, v) }

// errField is the error of a failed stream (its text may be the
// upstream's status message), cut.
func (s *classStream) errField(err error) zap.Field { return s.gate.String("error", err.Error()) }

// cut is an upstream value cut to the gate's bound, for the status.
func (s *classStream) cut(v string) string { return s.gate.Truncate(v) }

// rejected counts and records a response of typeURL at version that the
// relay NACKs, and returns the NACK's error_detail (the reason, whose
// upstream values reject cut). warnNow logs it (a warning, gated); a
// re-send of a version just rejected is logged at debug instead.
func (s *classStream) rejected(typeURL, version string, rej *RejectError, warnNow bool) *status.Status {
	s.metrics.Response(s.class.Name, typeURL, false)
	s.drops.Add(drop.UpstreamRejected)
	s.setStatus(func(st *ClassStreamStatus) {
		st.NACKs++
		st.LastNACK = fmt.Sprintf("%s %s: %s", s.cut(typeURL), s.cut(version), rej.Reason)
	})
	if warnNow {
		s.warn("rejected upstream response", s.field("type_url", typeURL), s.field("version", version), s.field("reason", rej.Reason))
	}
	return &status.Status{Code: int32(codes.InvalidArgument), Message: rej.Reason}
}

// cutArgs cuts the upstream values among a reason's arguments (strings,
// bytes, errors' text) to reasonFieldBytes.
func cutArgs(args []any) []any {
	for i, a := range args {
		switch v := a.(type) {
		case string:
			args[i] = clientlog.Truncate(v, reasonFieldBytes)
		case []byte:
			args[i] = clientlog.Truncate(string(v), reasonFieldBytes)
		case error:
			args[i] = clientlog.Truncate(v.Error(), reasonFieldBytes)
		}
	}
	return args
}
