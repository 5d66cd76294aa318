package overload

import "runtime/metrics"

// liveHeapMetric is the heap the last GC found live: what the relay holds,
// without the garbage GOGC lets pile up between collections (which would
// cross a mark at every allocation burst), read without stopping the world.
const liveHeapMetric = "/gc/heap/live:bytes"

// LiveHeap returns the live heap at the last garbage collection, in bytes.
func LiveHeap() uint64 {
	s := []metrics.Sample{{Name: liveHeapMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0 // not supported by this runtime: never over a mark
	}
	return s[0].Value.Uint64()
}
