package app

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// newTracerProvider returns the provider tracing.* configures: none (no-op)
// without an OTLP endpoint; else a batching OTLP/gRPC exporter (plaintext)
// sampling sample_ratio of the upstream responses. stop flushes it.
func newTracerProvider(cfg TracingConfig) (tp trace.TracerProvider, stop func(), err error) {
	if cfg.OTLPEndpoint == "" {
		return noop.NewTracerProvider(), func() {}, nil
	}
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, nil, err
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "xds-relay"))),
	)
	return sdk, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sdk.Shutdown(ctx)
	}, nil
}

const tracerName = "github.com/xds-relay/xds-relay"
