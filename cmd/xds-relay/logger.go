package main

import (
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// newLogger builds the relay's logger writing to w: JSON, or the console
// format with colour only on a terminal and never when NO_COLOR is set
// (no-color.org), client- and upstream-chosen text escaped
// (escapingEncoder). Stack traces are left out: the relay's errors say what
// went wrong in their message.
func newLogger(c app.LogConfig, w io.Writer) (*zap.Logger, zap.AtomicLevel, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, zap.AtomicLevel{}, fmt.Errorf("log.level: %w", err)
	}
	level := zap.NewAtomicLevelAt(lvl)
	var enc zapcore.Encoder
	if c.Format == "json" {
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	} else {
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		if colourful(w) {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		enc = zapcore.NewConsoleEncoder(ec)
	}
	core := zapcore.NewCore(escapingEncoder{enc}, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.AddCaller()), level, nil
}

// colourful reports whether w is a terminal and NO_COLOR is unset or empty.
func colourful(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
