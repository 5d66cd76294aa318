package overload

import (
	"io/fs"
	"math"
	"strconv"
	"strings"
)

// Where a budget came from (Config.From, Status.BudgetFrom).
const (
	FromConfig     = "config"
	FromGoMemLimit = "GOMEMLIMIT"
	FromCgroupV2   = "cgroup v2 memory.max"
	FromCgroupV1   = "cgroup v1 memory.limit_in_bytes"
	FromOff        = "off"
)

// Budget is a memory budget and where it came from; Bytes 0 is no budget.
type Budget struct {
	Bytes uint64
	From  string
}

// Detect returns the budget: configured when positive; none when
// negative (switched off); else the Go runtime's soft limit goMemLimit
// (GOMEMLIMIT, as debug.SetMemoryLimit(-1) reports it; math.MaxInt64 when
// unset); else the container's limit, read from root (the filesystem's
// root: cgroup v2's sys/fs/cgroup/memory.max, or v1's
// sys/fs/cgroup/memory/memory.limit_in_bytes); else none.
func Detect(configured int, goMemLimit int64, root fs.FS) Budget {
	switch {
	case configured > 0:
		return Budget{uint64(configured), FromConfig}
	case configured < 0:
		return Budget{0, FromOff}
	case goMemLimit > 0 && goMemLimit < math.MaxInt64:
		return Budget{uint64(goMemLimit), FromGoMemLimit}
	}
	if root == nil {
		return Budget{0, FromOff}
	}
	if n, ok := cgroupLimit(root, "sys/fs/cgroup/memory.max"); ok {
		return Budget{n, FromCgroupV2}
	}
	if n, ok := cgroupLimit(root, "sys/fs/cgroup/memory/memory.limit_in_bytes"); ok {
		return Budget{n, FromCgroupV1}
	}
	return Budget{0, FromOff}
}

// unlimitedV1 is where cgroup v1 puts "no limit": the largest page-aligned
// int64 (9223372036854771712); anything this high is no limit.
const unlimitedV1 = 1 << 62

// cgroupLimit reads a cgroup memory limit file: a byte count, or "max"
// (v2) or a huge number (v1) for none.
func cgroupLimit(root fs.FS, path string) (uint64, bool) {
	data, err := fs.ReadFile(root, path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil || n == 0 || n >= unlimitedV1 {
		return 0, false // "max", or no limit
	}
	return n, true
}
