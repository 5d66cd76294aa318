package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

type stringer string

func (s stringer) String() string { return string(s) }

// A node id, a NACK reason or an upstream's error with ESC, BEL or U+202E
// reaches the log escaped in both formats, wherever the string is: the
// message, a string field, an error, a Stringer, bytes, or a field added
// with With.
func TestLogLinesShowHiddenCharactersEscaped(t *testing.T) {
	evil := "node\x1b]0;pwned\x07\u202eevil"
	for _, format := range []string{"console", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log, _, err := newLogger(app.LogConfig{Level: "info", Format: format}, &buf)
			if err != nil {
				t.Fatal(err)
			}
			log.With(zap.String("with", evil)).Warn("msg "+evil,
				zap.String("node", evil), zap.Error(errors.New(evil)),
				zap.Stringer("stringer", stringer(evil)), zap.ByteString("bytes", []byte(evil)))
			line := buf.String()
			for _, raw := range []string{"\x1b", "\x07", "\u202e"} {
				if strings.Contains(line, raw) {
					t.Errorf("log line has %q raw: %q", raw, line)
				}
			}
			// Each of the six places shows the escaped text: the console
			// message as it is, fields (and JSON) as JSON strings, whose
			// backslashes are doubled.
			plain := `node\x1b]0;pwned\x07\u202eevil`
			quoted := strings.ReplaceAll(plain, `\`, `\\`)
			if n := strings.Count(line, plain) + strings.Count(line, quoted); n != 6 {
				t.Errorf("escaped text appears %d times, want 6: %q", n, line)
			}
		})
	}
}

// Plain text passes unchanged, fields in their order.
func TestLogLinesKeepPlainText(t *testing.T) {
	var buf bytes.Buffer
	log, _, err := newLogger(app.LogConfig{Level: "info", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", zap.String("a", "b\tc"), zap.Error(errors.New("boom")), zap.Int("n", 3))
	if got := buf.String(); !strings.Contains(got, `"msg":"hello","a":"b\tc","error":"boom","n":3`) {
		t.Errorf("plain line changed: %q", got)
	}
}
