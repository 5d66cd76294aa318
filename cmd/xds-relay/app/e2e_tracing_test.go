package app_test

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// An upstream response and its fan-out are traced: a response span with the
// class, type and version, and, under it, the fan-out span ending when the
// last stream has written the update.
func TestE2ETracing(t *testing.T) {
	ctx := testContext(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })

	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1", clusters("a"))
	cfg := app.DefaultConfig()
	cfg.Listen, cfg.Admin, cfg.Upstream.Address = "127.0.0.1:0", "127.0.0.1:0", m.Addr
	r, err := app.Start(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), app.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	c := dialADS(t, ctx, r.Addr(), "traced-1", "class-a")
	c.Subscribe(cdsType)
	c.Next(10 * time.Second)
	m.Set(t, "class-a", "v2", clusters("a", "b"))
	c.Next(10 * time.Second)

	eventually(t, ctx, "a fan-out span under a v2 response span", func() bool {
		responses := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			if s.Name() == "xds-relay.upstream.response" {
				responses[s.SpanContext().SpanID().String()] = s
			}
		}
		for _, s := range rec.Ended() {
			if s.Name() != "xds-relay.fanout" {
				continue
			}
			parent, ok := responses[s.Parent().SpanID().String()]
			if !ok {
				continue
			}
			attrs := map[string]string{}
			for _, kv := range parent.Attributes() {
				attrs[string(kv.Key)] = kv.Value.Emit()
			}
			if attrs["xds.class"] == "class-a" && attrs["xds.type_url"] == cdsType && attrs["xds.version"] == "v2" &&
				!s.EndTime().Before(s.StartTime()) {
				return true
			}
		}
		return false
	})
}
