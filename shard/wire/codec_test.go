package wire

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Decoded reports a message that does not decode instead of failing the
// receive (which gRPC would turn into INTERNAL), and decodes one that does.
func TestCodecDecoded(t *testing.T) {
	c := NewCodec()
	good, err := proto.Marshal(durationpb.New(1500))
	if err != nil {
		t.Fatal(err)
	}
	d := Decoded{Msg: &durationpb.Duration{}}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(good)}, &d); err != nil || d.Err != nil || d.Msg.(*durationpb.Duration).GetNanos() != 1500 {
		t.Fatalf("good message: err %v, decoded %v / %v", err, d.Err, d.Msg)
	}
	d = Decoded{Msg: &durationpb.Duration{}}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0xff, 0xff, 0xff})}, &d); err != nil || d.Err == nil {
		t.Fatalf("garbage: Unmarshal returned %v with Decoded.Err %v, want nil and a decoding error", err, d.Err)
	}
}

// Decoded with New and no Msg makes the message only when one arrives,
// once, and decodes into it.
func TestCodecDecodedNew(t *testing.T) {
	c := NewCodec()
	good, err := proto.Marshal(durationpb.New(2500))
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	d := Decoded{New: func() any { made++; return &durationpb.Duration{} }}
	if d.Msg != nil || made != 0 {
		t.Fatal("a message made before one arrived")
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(good)}, &d); err != nil || d.Err != nil || made != 1 {
		t.Fatalf("good message: err %v, decoded %v, %d made", err, d.Err, made)
	}
	if got := d.Msg.(*durationpb.Duration).GetNanos(); got != 2500 {
		t.Fatalf("decoded %d ns, want 2500", got)
	}
}

// Pooled receives a message of several buffers (HTTP/2 frames) as one, and
// holds nothing once freed.
func TestCodecPooled(t *testing.T) {
	c := NewCodec()
	var p Pooled
	for _, parts := range [][]string{{"abc", "defg", "h"}, {"one buffer"}, {"xy", "z"}} {
		var data mem.BufferSlice
		want := ""
		for _, s := range parts {
			data = append(data, mem.SliceBuffer(s))
			want += s
		}
		if err := c.Unmarshal(data, &p); err != nil || string(p.Bytes) != want {
			t.Fatalf("Unmarshal(%q) = %q, %v", parts, p.Bytes, err)
		}
		data.Free() // what gRPC does once Unmarshal returns
		if string(p.Bytes) != want {
			t.Fatalf("after gRPC freed its buffers: %q, want %q", p.Bytes, want)
		}
		p.Free()
		if p.Bytes != nil {
			t.Fatalf("freed Pooled still holds %q", p.Bytes)
		}
	}
	p.Free() // freeing an empty one does nothing
}
