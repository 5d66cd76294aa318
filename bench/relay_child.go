package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// RelayChildConfig says how to run the relay as a child process.
type RelayChildConfig struct {
	Bin           string // xds-relay binary
	Upstream      string // control plane address
	UpstreamDelta bool   // --upstream-protocol delta
	ConfigFile    string // --config (empty: none), with oneHostLimits off
	Stderr        io.Writer
	Timeout       time.Duration // to become ready
}

// RelayChild is a relay running as a child process, with its admin
// address for readiness and metrics.
type RelayChild struct {
	Addr, Admin string
	proc        *childProc
	config      string // the --config file written for it (oneHostConfig)
}

// StartRelayChild starts the relay on free loopback ports and waits until
// its /readyz answers 200.
func StartRelayChild(ctx context.Context, cfg RelayChildConfig) (*RelayChild, error) {
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--upstream", cfg.Upstream, "--listen", addr, "--admin", admin}
	if cfg.UpstreamDelta {
		args = append(args, "--upstream-protocol", "delta")
	}
	config, err := oneHostConfig(cfg.ConfigFile)
	if err != nil {
		return nil, err
	}
	args = append(args, "--config", config)
	proc, err := startProc(cfg.Bin, args, nil, nil, cfg.Stderr)
	if err != nil {
		_ = os.Remove(config)
		return nil, err
	}
	r := &RelayChild{Addr: addr, Admin: admin, proc: proc, config: config}
	deadline := time.Now().Add(cfg.Timeout)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		select {
		case err := <-r.proc.done:
			return nil, fmt.Errorf("relay exited: %v", err)
		case <-ctx.Done():
			r.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.Stop()
			return nil, errors.New("relay not ready in time")
		}
	}
}

// Usage reads the relay's CPU time and RSS.
func (r *RelayChild) Usage() (ProcUsage, error) { return r.proc.usage() }

// Metric sums the samples of a Prometheus metric on the relay's /metrics
// whose labels contain every one of labels (each `key="value"`).
func (r *RelayChild) Metric(name string, labels ...string) (float64, error) {
	resp, err := http.Get("http://" + r.Admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				continue next
			}
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// Stop interrupts the relay and waits for it: a second interrupt after 2 s
// skips the rest of its drain, a kill after 10 s more.
func (r *RelayChild) Stop() {
	defer os.Remove(r.config)
	for _, wait := range []time.Duration{2 * time.Second, 10 * time.Second} {
		_ = r.proc.cmd.Process.Signal(os.Interrupt)
		select {
		case <-r.proc.done:
			return
		case <-time.After(wait):
		}
	}
	_ = r.proc.cmd.Process.Kill()
	<-r.proc.done
}
