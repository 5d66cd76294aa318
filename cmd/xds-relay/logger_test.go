package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/relay"
)

func TestLogsToFilesAndPipesHaveNoColour(t *testing.T) {
	var buf bytes.Buffer
	log, _, err := newLogger(app.LogConfig{Level: "info", Format: "console"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Error("boom")
	if strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("log written to a buffer has ANSI escapes: %q", buf.String())
	}
	if strings.Contains(buf.String(), "goroutine") || strings.Contains(buf.String(), ".go:") && strings.Count(buf.String(), "\n") > 1 {
		t.Errorf("error line carries a stack trace: %q", buf.String())
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if colourful(f) {
		t.Error("a regular file counts as a terminal")
	}
}

func TestNoColorEnvironmentVariable(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	if colourful(os.Stderr) {
		t.Error("NO_COLOR=1 still colours the log")
	}
}

// fakeRelay stands in for a running relay: the drain itself is tested
// end to end in cmd/xds-relay/app; this checks what the command says.
type fakeRelay struct {
	streams  int
	shutdown chan struct{}
	closed   chan struct{}
	report   relay.DrainReport // what Shutdown returns
}

func (f *fakeRelay) Shutdown(time.Duration) relay.DrainReport {
	select {
	case <-f.shutdown:
	case <-f.closed:
	}
	return f.report
}
func (f *fakeRelay) Close()           { close(f.closed) }
func (f *fakeRelay) StreamCount() int { return f.streams }

func TestStopSaysWhatTheDrainDoes(t *testing.T) {
	var buf bytes.Buffer
	log, _, err := newLogger(app.LogConfig{Level: "info", Format: "console"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	sig := make(chan os.Signal, 2)
	r := &fakeRelay{streams: 3, shutdown: make(chan struct{}), closed: make(chan struct{})}
	sig <- os.Interrupt
	sig <- os.Interrupt // the second signal cuts the drain short
	stopAfterSignals(r, sig, 30*time.Second, log)
	out := buf.String()
	for _, want := range []string{"draining clients", "second signal stops at once", "30s", "stopping at once", "cut short", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}

	buf.Reset()
	r = &fakeRelay{shutdown: make(chan struct{}), closed: make(chan struct{})}
	close(r.shutdown)
	sig <- os.Interrupt
	stopAfterSignals(r, sig, 30*time.Second, log)
	if out := buf.String(); !strings.Contains(out, "nothing to drain") || !strings.Contains(out, "drain\": \"complete") && !strings.Contains(out, "complete") {
		t.Errorf("log %q; want the no-client stop and a complete drain", out)
	}
}

// TestStopSaysWhenTheDrainLeftStreams (issue 27, F1): a drain that had to
// cut streams (still open after it, closed with the server) ends with a
// warning that says so and how many, never "complete"; a drain that spread
// every stream says "complete" and what it refused.
func TestStopSaysWhenTheDrainLeftStreams(t *testing.T) {
	stop := func(rep relay.DrainReport) *observer.ObservedLogs {
		core, logs := observer.New(zap.InfoLevel)
		sig := make(chan os.Signal, 1)
		r := &fakeRelay{streams: 2, shutdown: make(chan struct{}), closed: make(chan struct{}), report: rep}
		close(r.shutdown)
		sig <- os.Interrupt
		stopAfterSignals(r, sig, time.Second, zap.New(core))
		return logs
	}
	logs := stop(relay.DrainReport{Streams: 1, Spread: 1, Refused: 1, CutAtEnd: 1})
	last := logs.All()[logs.Len()-1]
	if last.Message != "stopped" || last.Level != zapcore.WarnLevel {
		t.Fatalf("last line %q at %v, want the stop as a warning", last.Message, last.Level)
	}
	fields := last.ContextMap()
	if d, _ := fields["drain"].(string); strings.Contains(d, "complete") && !strings.Contains(d, "incomplete") {
		t.Errorf("a drain that cut a stream at the end logged drain=%q", d)
	}
	if fields["cut_at_end"] != int64(1) || fields["refused_streams"] != int64(1) {
		t.Errorf("fields %v: want cut_at_end 1 and refused_streams 1", fields)
	}

	logs = stop(relay.DrainReport{Streams: 2, Spread: 1, Left: 1, Refused: 3})
	last = logs.All()[logs.Len()-1]
	if fields := last.ContextMap(); last.Level != zapcore.InfoLevel || fields["drain"] != "complete" || fields["refused_streams"] != int64(3) {
		t.Errorf("a drain that spread every stream: %q at %v with %v, want info drain=complete refused_streams=3", last.Message, last.Level, fields)
	}
}
