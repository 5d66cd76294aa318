package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// relayTarget is the relay target: the relay as a measured child process in
// front of a control plane, in this process (only the relay is measured) or,
// with FanoutConfig.ControlPlaneChild, a measured child process of its own.
type relayTarget struct {
	cp      *ControlPlane // in this process; nil with cpChild
	cpChild *serveProc    // "xds-bench serve controlplane"; nil with cp
	relay   *RelayChild
	addr    string
	w       Workload
}

// startRelayTarget starts the control plane (in this process, or as
// "xds-bench serve controlplane serveArgs…") and the relay binary in front
// of it, and waits until the relay is ready.
func startRelayTarget(ctx context.Context, cfg FanoutConfig, serveArgs []string) (*relayTarget, error) {
	t := &relayTarget{w: cfg.workload()}
	var upstream string
	if cfg.ControlPlaneChild {
		child, err := startServe(ctx, cfg.BenchBin, ServeControlPlane, serveArgs, cfg.ServerStderr, cfg.Timeout)
		if err != nil {
			return nil, fmt.Errorf("the relay's control plane: %w", err)
		}
		t.cpChild, upstream = child, child.addr
	} else {
		cp, err := StartControlPlane(cfg.Cache)
		if err != nil {
			return nil, err
		}
		cp.SetPace(cfg.Pace)
		t.cp, upstream = cp, cp.Addr
	}
	if err := t.startRelay(ctx, cfg, upstream); err != nil {
		t.stopControlPlane()
		return nil, err
	}
	return t, nil
}

func (t *relayTarget) startRelay(ctx context.Context, cfg FanoutConfig, upstream string) error {
	if cfg.RelayBin == "" {
		return errors.New("no relay binary (FanoutConfig.RelayBin)")
	}
	relay, err := StartRelayChild(ctx, RelayChildConfig{Bin: cfg.RelayBin, Upstream: upstream, UpstreamDelta: cfg.UpstreamDelta,
		ConfigFile: cfg.RelayConfig, Stderr: cfg.ServerStderr, Timeout: cfg.Timeout})
	if err != nil {
		return err
	}
	t.relay, t.addr = relay, relay.Addr
	return nil
}

func (t *relayTarget) listenAddr() string        { return t.addr }
func (t *relayTarget) usage() (ProcUsage, error) { return t.relay.Usage() }

// controlPlaneUsage is the control plane child's usage; false in this
// process, where it is not measured.
func (t *relayTarget) controlPlaneUsage() (ProcUsage, bool, error) {
	if t.cpChild == nil {
		return ProcUsage{}, false, nil
	}
	u, err := t.cpChild.usage()
	return u, true, err
}

func (t *relayTarget) set(ctx context.Context, version string, changed int) (time.Time, error) {
	if t.cpChild != nil {
		// The child's own instant, as for direct.
		return t.cpChild.set(ctx, version, changed)
	}
	err := t.cp.SetClasses(t.w, version, changed)
	return time.Now(), err
}

// prepare does nothing: the control plane builds its responses when it has
// the state.
func (t *relayTarget) prepare(context.Context, string, int) error { return nil }

func (t *relayTarget) setAssignment(ctx context.Context, k, seq int) (time.Time, error) {
	if t.cpChild != nil {
		return t.cpChild.setAssignment(ctx, k, seq)
	}
	err := t.cp.SetAssignment(className(k), seq)
	return time.Now(), err
}

func (t *relayTarget) sentAt(ctx context.Context, k int, typeURL, version string) (time.Time, bool, error) {
	if t.cpChild != nil {
		return t.cpChild.upstreamSentAt(ctx, k, typeURL, version)
	}
	at, n := t.cp.SentAt(className(k), typeURL, version)
	return at, n > 0, nil
}

func (t *relayTarget) counts(ctx context.Context) (streams, requests int, err error) {
	if t.cpChild != nil {
		return t.cpChild.counts(ctx)
	}
	streams, requests = t.cp.Counts()
	return streams, requests, nil
}

func (t *relayTarget) stop() {
	t.relay.Stop()
	t.stopControlPlane()
}

func (t *relayTarget) stopControlPlane() {
	if t.cpChild != nil {
		t.cpChild.stop()
	} else {
		t.cp.Stop()
	}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
