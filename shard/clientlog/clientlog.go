// Package clientlog bounds what clients can put into the relay's log. Any
// client can trigger a log line (a NACK, a new node class) and choose what
// it holds (its node id, a type URL, a NACK message of megabytes): a Gate
// lets such lines through at a bounded rate, counting those it drops, and
// cuts each client-supplied field to a bounded length, noting the original
// length. A control plane is such a peer too: package upstream passes the
// lines its messages cause through a Gate of their own. It owns no logger:
// callers log through their own. It sits under shard, the layer both relay
// and upstream build on, so that neither imports the other's packages; it
// depends on zap and x/time/rate.
package clientlog

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// Gate rate-limits client-triggered log lines and truncates their client
// fields. Safe for concurrent use.
type Gate struct {
	// Set at construction, read-only.
	maxField int
	limit    *rate.Limiter    // safe for concurrent use on its own
	now      func() time.Time // time.Now; tests replace it

	mu      sync.Mutex
	dropped int // guarded by mu: lines refused since the last allowed
}

// NewGate returns a gate letting perSecond lines a second through (at least
// one) and cutting client fields to maxField bytes (at least 32). The rate
// is a token bucket holding up to a second's lines: an idle gate lets a
// burst of perSecond through, and never more than that in less than a
// second, however the lines fall around a second's edge.
func NewGate(perSecond, maxField int) *Gate {
	perSecond = max(perSecond, 1)
	return &Gate{
		maxField: max(maxField, 32),
		limit:    rate.NewLimiter(rate.Limit(perSecond), perSecond),
		now:      time.Now,
	}
}

// Allow reports whether a client-triggered line may be logged now. When it
// may, the field it returns counts the lines refused since the last one
// allowed ("suppressed"; zap.Skip when none): log it with the line.
func (g *Gate) Allow() (bool, zap.Field) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.limit.AllowN(g.now(), 1) {
		g.dropped++
		return false, zap.Skip()
	}
	f := zap.Skip()
	if g.dropped > 0 {
		f = zap.Int("suppressed", g.dropped)
		g.dropped = 0
	}
	return true, f
}

// String is a log field holding client input, cut to the gate's bound.
func (g *Gate) String(key, v string) zap.Field { return zap.String(key, g.Truncate(v)) }

// Truncate cuts v to the gate's bound (at a character boundary), noting its
// length: "abc…(1048576 bytes)". Shorter values are returned as they are.
func (g *Gate) Truncate(v string) string { return Truncate(v, g.maxField) }

// Truncate cuts v to at most n bytes including a note of its length, at a
// character boundary (the note alone, up to 24 bytes, if n is smaller); v
// itself if it is no longer than n.
func Truncate(v string, n int) string {
	if len(v) <= n {
		return v
	}
	note := "…(" + strconv.Itoa(len(v)) + " bytes)"
	cut := max(n-len(note), 0)
	for cut > 0 && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return v[:cut] + note
}
