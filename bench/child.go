package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// serveProc is the parent's handle on an "xds-bench serve" child (see
// serve.go for the protocol): the direct, limit and tcp targets.
type serveProc struct {
	proc    *childProc
	addr    string
	timeout time.Duration // for each command's reply

	mu    sync.Mutex // one command at a time
	stdin *os.File   // closing it ends the child
	// installedAt is when the last set (of version installedVersion)
	// installed each class's clusters, from the child's reply when it
	// paced them (pace.go); guarded by mu.
	installedAt      []time.Time
	installedVersion string
	lines            chan string // the child's stdout lines; closed at its end
	quit             chan struct{}
}

// startServe runs "bin serve kind args..." and waits for it to listen.
func startServe(ctx context.Context, bin, kind string, args []string, stderr io.Writer, timeout time.Duration) (*serveProc, error) {
	if bin == "" {
		return nil, errors.New("no xds-bench binary to run the server (FanoutConfig.BenchBin)")
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	proc, err := startProc(bin, append([]string{"serve", kind}, args...), inR, outW, stderr)
	// The child holds its own copies now.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	s := &serveProc{proc: proc, timeout: timeout, stdin: inW, lines: make(chan string), quit: make(chan struct{})}
	go func() {
		defer close(s.lines)
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			select {
			case s.lines <- sc.Text():
			case <-s.quit:
				return
			}
		}
	}()
	line, err := s.reply(ctx)
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("%s server: %w", kind, err)
	}
	addr, ok := strings.CutPrefix(line, "listening ")
	if !ok {
		s.stop()
		return nil, fmt.Errorf("%s server: unexpected first line %q", kind, line)
	}
	s.addr = addr
	return s, nil
}

// reply waits for the child's next line.
func (s *serveProc) reply(ctx context.Context) (string, error) {
	t := time.NewTimer(s.timeout)
	defer t.Stop()
	select {
	case line, ok := <-s.lines:
		if !ok {
			return "", errors.New("server exited")
		}
		return line, nil
	case <-t.C:
		return "", fmt.Errorf("no reply within %v", s.timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// command sends one command line and returns the reply's fields after an
// "ok"/"counts" word; an "error" reply is an error.
func (s *serveProc) command(ctx context.Context, line string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := fmt.Fprintln(s.stdin, line); err != nil {
		return nil, err
	}
	reply, err := s.reply(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", line, err)
	}
	if msg, ok := strings.CutPrefix(reply, "error "); ok {
		return nil, fmt.Errorf("%s: %s", line, msg)
	}
	return strings.Fields(reply)[1:], nil
}

func (s *serveProc) set(ctx context.Context, version string, changed int) (time.Time, error) {
	f, err := s.command(ctx, fmt.Sprintf("set %s %d", version, changed))
	if err != nil {
		return time.Time{}, err
	}
	at, err := instants(f)
	if err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	s.installedAt, s.installedVersion = at[1:], version
	s.mu.Unlock()
	return at[0], nil
}

// published reads an "ok UNIXNANO" reply's instant.
func (s *serveProc) published(f []string, err error) (time.Time, error) {
	if err != nil {
		return time.Time{}, err
	}
	if len(f) != 1 {
		return time.Time{}, fmt.Errorf("reply %q: want ok UNIXNANO", f)
	}
	at, err := instants(f)
	if err != nil {
		return time.Time{}, err
	}
	return at[0], nil
}

// instants reads the instants of an "ok UNIXNANO…" reply.
func instants(f []string) ([]time.Time, error) {
	if len(f) == 0 {
		return nil, errors.New("reply: want ok UNIXNANO")
	}
	out := make([]time.Time, len(f))
	for i, v := range f {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("reply %q: %w", f, err)
		}
		out[i] = time.Unix(0, ns)
	}
	return out, nil
}

// upstreamSentAt asks a control plane child when it finished sending
// version of typeURL to class k's stream ("sent"; false: not sent).
func (s *serveProc) upstreamSentAt(ctx context.Context, k int, typeURL, version string) (time.Time, bool, error) {
	f, err := s.command(ctx, fmt.Sprintf("sent %d %s %s", k, typeURL, version))
	if err != nil {
		return time.Time{}, false, err
	}
	if len(f) != 2 {
		return time.Time{}, false, fmt.Errorf("sent: reply %q, want ok UNIXNANO COUNT", f)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil || n == 0 {
		return time.Time{}, false, err
	}
	at, err := instants(f[:1])
	if err != nil {
		return time.Time{}, false, err
	}
	return at[0], true, nil
}

func (s *serveProc) prepare(ctx context.Context, version string, changed int) error {
	_, err := s.command(ctx, fmt.Sprintf("prepare %s %d", version, changed))
	return err
}

func (s *serveProc) setAssignment(ctx context.Context, k, seq int) (time.Time, error) {
	return s.published(s.command(ctx, fmt.Sprintf("eds %d %d", k, seq)))
}

func (s *serveProc) counts(ctx context.Context) (streams, requests int, err error) {
	f, err := s.command(ctx, "counts")
	if err != nil {
		return 0, 0, err
	}
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("counts: reply %q", f)
	}
	if streams, err = strconv.Atoi(f[0]); err != nil {
		return 0, 0, err
	}
	requests, err = strconv.Atoi(f[1])
	return streams, requests, err
}

// stop closes the child's stdin (it exits) and waits for it.
func (s *serveProc) stop() {
	s.stdin.Close()
	s.proc.stop(nil)
	close(s.quit)
	for range s.lines {
	}
}
