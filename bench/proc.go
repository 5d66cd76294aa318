package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProcUsage is a process's cumulative CPU time and current resident memory,
// read from /proc (Linux).
type ProcUsage struct {
	CPU time.Duration
	RSS int64 // bytes
}

// ReadProc reads the process's CPU clock (nanoseconds; /proc/PID/stat's
// 10 ms ticks where that clock is not readable) and /proc/PID/status.
func ReadProc(pid int) (ProcUsage, error) {
	var u ProcUsage
	var ts unix.Timespec
	// The process CPU-time clock of pid (clock_getcpuclockid(3)):
	// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED), every thread's
	// scheduler runtime, the exited ones' too.
	if err := unix.ClockGettime(int32((^pid)<<3|2), &ts); err == nil {
		u.CPU = time.Duration(ts.Nano())
	} else {
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
	}
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

// childProc is a server the bench started as a child process, so that its
// CPU and memory are its own.
type childProc struct {
	cmd  *exec.Cmd
	done chan error // cmd.Wait's result, once
}

func startProc(bin string, args []string, stdin io.Reader, stdout, stderr io.Writer) (*childProc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// A server must not outlive the bench: killed if the bench dies (the
	// serve children also end on stdin EOF; the relay has no such link).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &childProc{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

func (p *childProc) usage() (ProcUsage, error) { return ReadProc(p.cmd.Process.Pid) }

// stop asks the process to end (with sig, or by the caller closing its
// stdin when sig is nil) and kills it if it has not within ten seconds.
func (p *childProc) stop(sig os.Signal) {
	if sig != nil {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
