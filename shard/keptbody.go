package shard

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// BodyKeepAlive is how long a response keeps a full-state body (the SotW
// body, the delta full-state body) after streams last asked for it. A
// fan-out asks for it once per stream, and streams joining the shard one
// by one (a rolling restart) each ask once: while they come at least once
// per BodyKeepAlive the body is built once. Afterwards the response holds
// it weakly: it lives on while an in-flight write (or another class's
// shard sharing it, see bodyCache) holds it, and is otherwise collected;
// the next stream rebuilds it (one concatenation of the held resources).
// An idle class then holds its resources and indexes, not their encoding
// too. A body is released between one and two BodyKeepAlive after its last
// use.
const BodyKeepAlive = 5 * time.Second

// keptBody is one of a response's bodies: held strongly while streams use
// it, then weakly (see BodyKeepAlive). The zero keptBody holds nothing.
type keptBody struct {
	// Accessed atomically: strong is the body while kept (nil once
	// released); used records a get since the timer last looked.
	strong atomic.Pointer[wire.Body]
	used   atomic.Bool

	// Guarded by mu, which serializes builds (a fan-out's writers do not
	// all build at once) and the timer. mu is a leaf lock but for
	// bodyCache.mu, taken inside it by a build.
	mu     sync.Mutex
	weak   wire.WeakBody // the body last held; zero before the first
	timer  *time.Timer   // runs expire; nil before the first get
	builds int           // times get called build (tests)
}

// get returns the body, from build when the body is neither kept nor
// still alive elsewhere. build may return a body shared with other
// responses (bodyCache).
func (k *keptBody) get(build func() wire.Body) wire.Body {
	if p := k.strong.Load(); p != nil {
		if !k.used.Load() { // a load, not a store, on every write
			k.used.Store(true)
		}
		return *p
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.strong.Load(); p != nil {
		k.used.Store(true)
		return *p
	}
	b, live := k.weak.Body()
	if !live {
		b = build()
		k.builds++
		if b.Len() == 0 {
			return b // nothing to keep, and no identity to refer to weakly
		}
		k.weak = b.Weak()
	}
	k.strong.Store(&b)
	k.used.Store(false)
	if k.timer == nil {
		k.timer = time.AfterFunc(BodyKeepAlive, k.expire)
	} else {
		k.timer.Reset(BodyKeepAlive)
	}
	return b
}

// expire runs BodyKeepAlive after the body was kept or last looked at: it
// looks again later if the body was used meanwhile, or else holds it
// weakly only. It runs on the timer's own goroutine, which ends with it;
// release stops the timer.
func (k *keptBody) expire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.strong.Load() == nil {
		return // released meanwhile
	}
	if k.used.Swap(false) {
		k.timer.Reset(BodyKeepAlive)
		return
	}
	k.strong.Store(nil)
}

// release stops keeping the body now: the response was superseded, so
// streams rarely ask for it again (a SotW stream's queue supersedes it too).
// Streams still to write it hold it while they do; one asking later gets it
// while it is alive, or rebuilt, and keeps it kept BodyKeepAlive again.
func (k *keptBody) release() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.strong.Store(nil)
	if k.timer != nil {
		k.timer.Stop()
	}
}

// kept reports whether the body is held strongly (tests).
func (k *keptBody) kept() bool { return k.strong.Load() != nil }

// buildCount returns how many times get built the body (tests).
func (k *keptBody) buildCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.builds
}
