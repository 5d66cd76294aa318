package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// relayTarget is the relay target: the relay as a measured child process in
// front of a control plane in this process (only the relay is measured).
type relayTarget struct {
	cp                *ControlPlane
	relay             *childProc
	addr              string
	classes, clusters int
}

// startRelayTarget starts the control plane and the relay binary bin in
// front of it, and waits until the relay is ready. configFile (optional) is
// the relay's --config.
func startRelayTarget(ctx context.Context, cfg FanoutConfig) (*relayTarget, error) {
	cp, err := StartControlPlane(cfg.Cache)
	if err != nil {
		return nil, err
	}
	t := &relayTarget{cp: cp, classes: cfg.Classes, clusters: cfg.Clusters}
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
	addr, err := freePort()
	if err != nil {
		return err
	}
	admin, err := freePort()
	if err != nil {
		return err
	}
	args := []string{"--upstream", t.cp.Addr, "--listen", addr, "--admin", admin}
	if cfg.UpstreamDelta {
		args = append(args, "--upstream-protocol", "delta")
	}
	if cfg.RelayConfig != "" {
		args = append(args, "--config", cfg.RelayConfig)
	}
	if t.relay, err = startProc(cfg.RelayBin, args, nil, nil, cfg.ServerStderr); err != nil {
		return err
	}
	t.addr = addr
	deadline := time.Now().Add(cfg.Timeout)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-t.relay.done:

			return fmt.Errorf("relay exited: %v", err)
		case <-ctx.Done():
			t.relay.stop(os.Interrupt)
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.relay.stop(os.Interrupt)
			return errors.New("relay not ready in time")
		}
	}
}

func (t *relayTarget) listenAddr() string        { return t.addr }
func (t *relayTarget) usage() (ProcUsage, error) { return t.relay.usage() }

func (t *relayTarget) set(_ context.Context, version string, changed int) error {
	return setAllClasses(t.cp, t.classes, version, t.clusters, changed)
}

func (t *relayTarget) counts(context.Context) (streams, requests int, err error) {
	streams, requests = t.cp.Counts()
	return streams, requests, nil
}

func (t *relayTarget) stop() {
	t.relay.stop(os.Interrupt)
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
