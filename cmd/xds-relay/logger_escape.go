package main

import (
	"fmt"

	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// escapingEncoder writes every string of a log line (the message, string,
// error and Stringer fields, in the line or added by With) with the
// characters a terminal acts on shown escaped (app.EscapeHidden): a node
// id or an upstream's NACK reason carrying ESC, BEL or U+202E cannot clear,
// retitle or reorder the terminal of an operator tailing the log. The
// encoder's own output (the level's colour) is written as it is.
type escapingEncoder struct {
	zapcore.Encoder
}

func (e escapingEncoder) Clone() zapcore.Encoder {
	return escapingEncoder{e.Encoder.Clone()}
}

func (e escapingEncoder) AddString(key, value string) {
	e.Encoder.AddString(key, app.EscapeHidden(value))
}

func (e escapingEncoder) AddByteString(key string, value []byte) {
	e.Encoder.AddString(key, app.EscapeHidden(string(value)))
}

func (e escapingEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	ent.Message = app.EscapeHidden(ent.Message)
	out, copied := fields, false
	for i, f := range fields {
		g, changed := escapedField(f)
		if !changed {
			continue
		}
		if !copied { // the caller's fields are not ours to change
			out, copied = append([]zapcore.Field(nil), fields...), true
		}
		out[i] = g
	}
	return e.Encoder.EncodeEntry(ent, out)
}

// escapedField is f with its text escaped, and whether that changed it:
// the fields the inner encoder would write as strings without passing
// through AddString of this encoder.
func escapedField(f zapcore.Field) (zapcore.Field, bool) {
	var s string
	switch f.Type {
	case zapcore.StringType:
		s = f.String
	case zapcore.ByteStringType:
		b, _ := f.Interface.([]byte)
		s = string(b)
	case zapcore.ErrorType:
		err, _ := f.Interface.(error)
		if err == nil {
			return f, false
		}
		s = err.Error()
	case zapcore.StringerType:
		st, _ := f.Interface.(fmt.Stringer)
		if st == nil {
			return f, false
		}
		s = st.String()
	default:
		return f, false
	}
	e := app.EscapeHidden(s)
	if e == s {
		return f, false
	}
	return zapcore.Field{Key: f.Key, Type: zapcore.StringType, String: e}, true
}
