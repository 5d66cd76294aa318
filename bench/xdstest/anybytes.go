package xdstest

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// AnyBytes returns m wrapped in an Any and encoded deterministically: one
// resource as a control plane sends it. It panics if m does not encode, a
// mistake in the test that calls it.
func AnyBytes(m proto.Message) []byte {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	if err != nil {
		panic(err)
	}
	return b
}
