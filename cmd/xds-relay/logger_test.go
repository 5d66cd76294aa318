package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
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
}

func (f *fakeRelay) Shutdown(time.Duration) {
	select {
	case <-f.shutdown:
	case <-f.closed:
	}
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
