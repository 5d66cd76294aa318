package dedup

// Signal collapses any number of "something changed" notifications into one
// pending wake-up: a buffer-1 channel. Notify never blocks; the owner of the
// signal drains C and then re-reads the state it guards, so no change is lost
// and a burst costs one wake-up. Read-only after creation (the channel is
// the synchronisation): any goroutine may Notify, one owner receives.
type Signal struct{ c chan struct{} }

// NewSignal returns an unsignalled Signal.
func NewSignal() Signal { return Signal{c: make(chan struct{}, 1)} }

// Notify marks the signal pending. It never blocks.
func (s Signal) Notify() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// C is the channel to receive the wake-up from.
func (s Signal) C() <-chan struct{} { return s.c }
