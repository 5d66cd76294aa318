package wire

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Raw receives a message's bytes undecoded (see Codec.Unmarshal).
type Raw struct{ Bytes []byte }

// Pooled receives a message's bytes undecoded, like Raw, into a buffer of
// a pool: Bytes is valid until Free, which returns the buffer. A receiver
// that is done with each message before the next (the upstream's, which
// copies what it keeps) so spares the collector a copy of every message.
type Pooled struct {
	Bytes []byte
	buf   mem.Buffer
}

// Free returns the buffer Bytes is in; Bytes is nil from then on. Freeing a
// Pooled that holds nothing does nothing.
func (p *Pooled) Free() {
	if p.buf != nil {
		p.buf.Free()
	}
	*p = Pooled{}
}

// receivePool holds the buffers of Pooled messages: powers of two from
// 4 KiB to 16 MiB, the smallest that fits (larger messages are allocated).
var receivePool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24)
	if err != nil {
		panic(err)
	}
	return p
}()

// Decoded receives a message decoded into Msg (by the standard proto codec)
// without failing the receive when it does not decode: Err is set instead.
// gRPC turns a codec error into INTERNAL, and an undecodable request is the
// client's fault, which the receiver can then answer as such.
type Decoded struct {
	Msg any // a proto message
	// New, when Msg is nil, makes the message to decode into once one has
	// arrived, so a receiver waiting for the next message holds none: a
	// relay's idle stream waits in Recv for its whole life.
	New func() any
	Err error
}

// Codec is the gRPC codec of the relay's streams. It writes *Stamped and
// reads *Raw and *Pooled without any protobuf work, and falls back to the standard proto
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
	if p, ok := v.(*Pooled); ok {
		p.Free()
		p.buf = data.MaterializeToBuffer(receivePool) // a reference when data is one buffer
		p.Bytes = p.buf.ReadOnlyData()
		return nil
	}
	if d, ok := v.(*Decoded); ok {
		if d.Msg == nil && d.New != nil {
			d.Msg = d.New()
		}
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
