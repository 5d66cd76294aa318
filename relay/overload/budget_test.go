package overload

import (
	"math"
	"runtime"
	"testing"
	"testing/fstest"
)

func TestDetectBudget(t *testing.T) {
	v2 := fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("536870912\n")}}
	v2max := fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("max\n")}}
	v1 := fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("268435456\n")}}
	v1none := fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712\n")}}
	for _, tc := range []struct {
		name       string
		configured int
		goMemLimit int64
		root       fstest.MapFS
		want       Budget
	}{
		{"configured wins", 100, 200, v2, Budget{100, FromConfig}},
		{"negative is off", -1, 200, v2, Budget{0, FromOff}},
		{"GOMEMLIMIT", 0, 200, v2, Budget{200, FromGoMemLimit}},
		{"cgroup v2", 0, math.MaxInt64, v2, Budget{536870912, FromCgroupV2}},
		{"cgroup v2 max", 0, math.MaxInt64, v2max, Budget{0, FromOff}},
		{"cgroup v1", 0, math.MaxInt64, v1, Budget{268435456, FromCgroupV1}},
		{"cgroup v1 unlimited", 0, math.MaxInt64, v1none, Budget{0, FromOff}},
		{"nothing", 0, math.MaxInt64, fstest.MapFS{}, Budget{0, FromOff}},
	} {
		if got := Detect(tc.configured, tc.goMemLimit, tc.root); got != tc.want {
			t.Errorf("%s: Detect = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The live heap reads from the runtime: after a GC it is not zero.
func TestLiveHeapReads(t *testing.T) {
	keep := make([]byte, 1<<20)
	runtime.GC()
	if LiveHeap() < 1<<20 {
		t.Fatalf("LiveHeap = %d with 1 MiB held, want more", LiveHeap())
	}
	runtime.KeepAlive(keep)
}
