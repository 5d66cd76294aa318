package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// Upstream kinds of a cell.
const (
	UpSnapshotADS = xdstest.SnapshotADS // go-control-plane snapshot cache, ADS mode
	UpSnapshot    = xdstest.Snapshot    // go-control-plane snapshot cache
	UpLinear      = xdstest.Linear      // go-control-plane linear caches
	UpFile        = "file"              // the relay's own file source
	UpChain       = "chain"             // relay -> relay -> go-control-plane snapshot cache
)

// Cell is one upstream of the matrix.
type Cell struct {
	Name     string
	Upstream string // an Up* kind
	Delta    bool   // the relays' upstream protocol is delta (not for UpFile)
	// Exclude lists features the cell does not generate by default, each
	// with its reason (docs/conformance.md lists them).
	Exclude map[Feature]string
}

// absenceUnknownER: the client-facing relay learns of a deleted
// RouteConfiguration or ClusterLoadAssignment only from a delta upstream or
// the file source.
func (c Cell) absenceUnknownER() bool { return c.Upstream != UpFile && !c.Delta }

// canRestart: the cell has a control plane to restart.
func (c Cell) canRestart() bool { return c.Upstream != UpFile }

// upstream is a running cell: its source of resources and relays.
type upstream struct {
	cell   Cell
	cp     *xdstest.ControlPlane // nil for UpFile
	dir    string                // UpFile: the source directory
	relays []*app.Relay          // the last one serves the clients
}

func relayConfig(listenUpstream string, delta bool, id string) app.Config {
	cfg := app.DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	cfg.Upstream.Address = listenUpstream
	cfg.Upstream.RelayID = id
	cfg.Upstream.Protocol = "sotw"
	if delta {
		cfg.Upstream.Protocol = "delta"
	}
	cfg.Upstream.Backoff.Initial = 20 * time.Millisecond
	cfg.Upstream.Backoff.Max = 200 * time.Millisecond
	return cfg
}

func startUpstream(cell Cell, log *zap.Logger, tmp string) (_ *upstream, err error) {
	u := &upstream{cell: cell}
	defer func() {
		if err != nil {
			u.close()
		}
	}()
	switch cell.Upstream {
	case UpFile:
		u.dir = filepath.Join(tmp, "source")
		if err := os.MkdirAll(u.dir, 0o755); err != nil {
			return nil, err
		}
		cfg := relayConfig("", false, "relay-file")
		cfg.Source.Dir = u.dir
		r, err := app.Start(cfg, log.Named("relay"))
		if err != nil {
			return nil, err
		}
		u.relays = append(u.relays, r)
		return u, nil
	case UpChain:
		if u.cp, err = xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.Snapshot}); err != nil {
			return nil, err
		}
		first, err := app.Start(relayConfig(u.cp.Addr, cell.Delta, "relay-tier1"), log.Named("tier1"))
		if err != nil {
			return nil, err
		}
		u.relays = append(u.relays, first)
		second, err := app.Start(relayConfig(first.Addr(), cell.Delta, "relay-tier2"), log.Named("tier2"))
		if err != nil {
			return nil, err
		}
		u.relays = append(u.relays, second)
		return u, nil
	default:
		if u.cp, err = xdstest.StartControlPlane(xdstest.CPOptions{Cache: cell.Upstream}); err != nil {
			return nil, err
		}
		r, err := app.Start(relayConfig(u.cp.Addr, cell.Delta, "relay"), log.Named("relay"))
		if err != nil {
			return nil, err
		}
		u.relays = append(u.relays, r)
		return u, nil
	}
}

// addr is where clients connect.
func (u *upstream) addr() string { return u.relays[len(u.relays)-1].Addr() }

func (u *upstream) set(t, name string, gen int) error {
	typeURL := xdstest.Long(t)
	res := xdstest.Resource(typeURL, name, gen)
	if u.cp != nil {
		return u.cp.Set(typeURL, res)
	}
	a, err := anypb.New(res)
	if err != nil {
		return err
	}
	data, err := protojson.Marshal(&discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{a}})
	if err != nil {
		return err
	}
	// Written aside (dotfiles are ignored) and renamed: the source never
	// reads half a file.
	tmp := filepath.Join(u.dir, "."+fileName(t, name))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(u.dir, fileName(t, name)))
}

func fileName(t, name string) string { return fmt.Sprintf("%s-%s.json", t, name) }

func (u *upstream) delete(t, name string) error {
	if u.cp != nil {
		return u.cp.Delete(xdstest.Long(t), name)
	}
	err := os.Remove(filepath.Join(u.dir, fileName(t, name)))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

func (u *upstream) restart() error {
	if u.cp == nil {
		return nil
	}
	return u.cp.Restart()
}

func (u *upstream) close() {
	for i := len(u.relays) - 1; i >= 0; i-- {
		u.relays[i].Close()
	}
	if u.cp != nil {
		u.cp.Stop()
	}
}
