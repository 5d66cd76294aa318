package wire

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Raw receives a message's bytes undecoded (see Codec.Unmarshal).
type Raw struct{ Bytes []byte }

// Decoded receives a message decoded into Msg (by the standard proto codec)
// without failing the receive when it does not decode: Err is set instead.
// gRPC turns a codec error into INTERNAL, and an undecodable request is the
// client's fault, which the receiver can then answer as such.
type Decoded struct {
	Msg any // a proto message
	Err error
}

// Codec is the gRPC codec of the relay's streams. It writes *Stamped and
// reads *Raw without any protobuf work, and falls back to the standard proto
// codec for every other type. It keeps the name "proto" so peers see an
// ordinary application/grpc+proto content type. Read-only after creation;
// safe for concurrent use.
type Codec struct{ fallback encoding.CodecV2 }

var _ encoding.CodecV2 = Codec{}

// NewCodec returns the relay codec.
func NewCodec() Codec { return Codec{fallback: encoding.GetCodecV2(proto.Name)} }

// Marshal implements encoding.CodecV2.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	if s, ok := v.(*Stamped); ok {
		// The buffers are already made (see Body and Stamper): the slice
		// itself is the one allocation, and gRPC frees the suffix once written.
		if s.Body.buf == nil {
			return mem.BufferSlice{s.suffix}, nil
		}
		return mem.BufferSlice{s.Body.buf, s.suffix}, nil
	}
	return c.fallback.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*Raw); ok {
		r.Bytes = data.Materialize() // a copy: data is freed when we return
		return nil
	}
	if d, ok := v.(*Decoded); ok {
		d.Err = c.fallback.Unmarshal(data, d.Msg)
		return nil
	}
	if v == nil {
		return fmt.Errorf("wire: unmarshal into nil")
	}
	return c.fallback.Unmarshal(data, v)
}

// Name implements encoding.CodecV2.
func (Codec) Name() string { return proto.Name }
