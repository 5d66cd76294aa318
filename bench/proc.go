package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ProcUsage is a process's cumulative CPU time and current resident memory,
// read from /proc (Linux).
type ProcUsage struct {
	CPU time.Duration
	RSS int64 // bytes
}

// ReadProc reads /proc/PID/stat and /proc/PID/status.
func ReadProc(pid int) (ProcUsage, error) {
	var u ProcUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the parenthesised command name; utime and stime are the
	// 14th and 15th fields of the whole line, in clock ticks (100 Hz on Linux).
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return u, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	u.CPU = time.Duration(utime+stime) * 10 * time.Millisecond
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			u.RSS = kb * 1024
		}
	}
	return u, sc.Err()
}
