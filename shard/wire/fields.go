package wire

import "google.golang.org/protobuf/encoding/protowire"

// HasBytesField reports whether the encoded message b has a
// length-delimited field of one of nums (a message, string or bytes field,
// or an element of a repeated or map one); malformed b is an error.
func HasBytesField(b []byte, nums ...protowire.Number) (bool, error) {
	found := false
	err := forEachBytesField(b, func(num protowire.Number, _ []byte) {
		for _, n := range nums {
			found = found || num == n
		}
	})
	return found && err == nil, err
}
