package wire

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// BenchmarkWriteBody measures the issue 14 alternative to a body copied out
// of the resources: a body made of references to the resources' own bytes
// (a gRPC buffer slice of framing and resources), against the relay's
// single-buffer body. Per stream write, each is what the codec returns and
// what gRPC's loopy writer does with it: 16 KiB frames gathered with
// Reader.Peek and copied into the connection's buffer, then Discard.
// 1,000 resources of 125 bytes, as in the bench.
func BenchmarkWriteBody(b *testing.B) {
	const resources, size, frame = 1000, 125, 16384
	anys := make([][]byte, resources)
	bb := NewBodyBuilder("v1", resources*(size+3))
	for i := range anys {
		anys[i] = make([]byte, size)
		bb.AddResource(anys[i])
	}
	body := NewBody(bb.Finish("t/x"))
	// The reference body: per resource its field header (tag and length),
	// then the resource's own bytes.
	var refs []mem.Buffer
	enc := NewBodyBuilder("v1", 0).Finish("")
	refs = append(refs, mem.SliceBuffer(enc[:len(enc)-2])) // version_info only
	for _, a := range anys {
		hdr := protowire.AppendVarint(protowire.AppendTag(nil, respResources, protowire.BytesType), uint64(len(a)))
		refs = append(refs, mem.SliceBuffer(hdr), mem.SliceBuffer(a))
	}
	refs = append(refs, mem.SliceBuffer(appendString(nil, respTypeURL, "t/x")))
	st := NewStamper(1)
	out := make([]byte, 0, frame+64)
	var peek [][]byte
	write := func(data mem.BufferSlice) {
		r := data.Reader()
		for r.Remaining() > 0 {
			n := min(frame, r.Remaining())
			peek, _ = r.Peek(n, peek[:0])
			out = out[:0]
			for _, p := range peek {
				out = append(out, p...)
			}
			_, _ = r.Discard(n)
		}
		_ = r.Close()
	}
	b.Run("one-buffer", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s := st.Stamp(body, uint64(i+1))
			data, _ := NewCodec().Marshal(&s)
			write(data)
		}
	})
	b.Run("references", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s := st.Stamp(Body{}, uint64(i+1))
			data := append(mem.BufferSlice(refs[:len(refs):len(refs)]), s.suffix) // each write owns its slice
			write(data)
		}
	})
}
