package bench

import (
	"context"
	"errors"
	"net"
	"time"
)

// relayTarget is the relay target: the relay as a measured child process in
// front of a control plane in this process (only the relay is measured).
type relayTarget struct {
	cp    *ControlPlane
	relay *RelayChild
	addr  string
	w     Workload
}

// startRelayTarget starts the control plane and the relay binary bin in
// front of it, and waits until the relay is ready. configFile (optional) is
// the relay's --config.
func startRelayTarget(ctx context.Context, cfg FanoutConfig) (*relayTarget, error) {
	cp, err := StartControlPlane(cfg.Cache)
	if err != nil {
		return nil, err
	}
	cp.SetPace(cfg.Pace)
	t := &relayTarget{cp: cp, w: cfg.workload()}
	if err := t.startRelay(ctx, cfg); err != nil {
		cp.Stop()
		return nil, err
	}
	return t, nil
}

func (t *relayTarget) startRelay(ctx context.Context, cfg FanoutConfig) error {
	if cfg.RelayBin == "" {
		return errors.New("no relay binary (FanoutConfig.RelayBin)")
	}
	relay, err := StartRelayChild(ctx, RelayChildConfig{Bin: cfg.RelayBin, Upstream: t.cp.Addr, UpstreamDelta: cfg.UpstreamDelta,
		ConfigFile: cfg.RelayConfig, Stderr: cfg.ServerStderr, Timeout: cfg.Timeout})
	if err != nil {
		return err
	}
	t.relay, t.addr = relay, relay.Addr
	return nil
}

func (t *relayTarget) listenAddr() string        { return t.addr }
func (t *relayTarget) usage() (ProcUsage, error) { return t.relay.Usage() }

func (t *relayTarget) set(_ context.Context, version string, changed int) (time.Time, error) {
	err := t.cp.SetClasses(t.w, version, changed)
	return time.Now(), err
}

// prepare does nothing: the control plane is not measured.
func (t *relayTarget) prepare(context.Context, string, int) error { return nil }

func (t *relayTarget) setAssignment(_ context.Context, k, seq int) (time.Time, error) {
	err := t.cp.SetAssignment(className(k), seq)
	return time.Now(), err
}

func (t *relayTarget) sentAt(k int, typeURL, version string) (time.Time, bool) {
	at, n := t.cp.SentAt(className(k), typeURL, version)
	return at, n > 0
}

func (t *relayTarget) counts(context.Context) (streams, requests int, err error) {
	streams, requests = t.cp.Counts()
	return streams, requests, nil
}

func (t *relayTarget) stop() {
	t.relay.Stop()
	t.cp.Stop()
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
