package wire

// AppendTo appends the whole message (body then nonce suffix) to dst, as
// the codec writes it (for this package's tests only).
func (s *Stamped) AppendTo(dst []byte) []byte {
	return append(append(dst, s.Body.Bytes()...), s.suffix.ReadOnlyData()...)
}
