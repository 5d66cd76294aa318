package wire

import (
	"runtime"
	"weak"
)

// WeakBody refers to a Body without keeping it alive: a cache of bodies
// holds these, so that a body lives exactly as long as something that sends
// it (a response, an in-flight write) holds it. Comparable: two WeakBody
// values are equal when made from the same body.
type WeakBody struct{ p weak.Pointer[bodyBuf] }

// Weak returns a weak reference to b.
func (b Body) Weak() WeakBody { return WeakBody{weak.Make(b.buf)} }

// Body returns the body, or false once it has been collected (or w is the
// zero WeakBody).
func (w WeakBody) Body() (Body, bool) {
	p := w.p.Value()
	return Body{buf: p}, p != nil
}

// OnCollected arranges for f(arg) to be called, in a goroutine of the
// runtime's, some time after b is no longer reachable. arg must not refer to
// b (a WeakBody may). b must not be the zero Body.
func OnCollected[T any](b Body, f func(T), arg T) {
	runtime.AddCleanup(b.buf, f, arg)
}
