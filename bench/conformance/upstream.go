package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
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
	// UpSite: a control plane with a site-specific wildcard
	// (xdstest.SiteWildcard), the relay set upstream.wildcard: site_specific.
	UpSite = "site"
)

// siteOnDemand reports the names the UpSite control plane's wildcard leaves
// out: one Listener and one Cluster of the pool, asked only by name (as
// Envoy's on-demand CDS asks them).
func siteOnDemand(t, name string) bool { return t == "L" && name == "l2" || t == "C" && name == "c3" }

// Cell is one upstream of the matrix.
type Cell struct {
	Name     string
	Upstream string // an Up* kind
	Delta    bool   // the relays' upstream protocol is delta (not for UpFile)
	// AskWildcard: the relay facing the control plane asks every type as
	// the wildcard (upstream.ask: wildcard).
	AskWildcard bool
	// Exclude lists features the cell does not generate by default, each
	// with its reason (docs/conformance.md lists them).
	Exclude map[Feature]string
}

// absenceUnknownER: the client-facing relay learns of a deleted
// RouteConfiguration or ClusterLoadAssignment only from a delta upstream or
// the file source.
func (c Cell) absenceUnknownER() bool { return c.Upstream != UpFile && !c.Delta }

// canRestart: the cell has a control plane to restart (the site-specific
// one keeps its state only in memory: it is not restarted).
func (c Cell) canRestart() bool { return c.Upstream != UpFile && c.Upstream != UpSite }

// upstream is a running cell: its source of resources and relays.
type upstream struct {
	cell   Cell
	cp     *xdstest.ControlPlane // nil for UpFile and UpSite
	site   *xdstest.SiteWildcard // UpSite only
	dir    string                // UpFile: the source directory
	relays []*app.Relay          // the last one serves the clients

	// UpFile: a client of a class of its own watching the anchor, whose
	// generation settle bumps (see settle).
	probe     *xdstest.Client
	anchorGen int
}

// anchorName is the file cell's anchor: a Runtime no schedule uses.
const anchorName = "conformance-anchor"

const runtimeType = resource.RuntimeType

func relayConfig(listenUpstream string, delta bool, id string, askWildcard bool, resync time.Duration) app.Config {
	cfg := app.DefaultConfig()
	if resync != 0 {
		cfg.Upstream.ResyncInterval = resync
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	cfg.Upstream.Address = listenUpstream
	cfg.Upstream.RelayID = id
	cfg.Upstream.Protocol = "sotw"
	if delta {
		cfg.Upstream.Protocol = "delta"
	}
	if askWildcard {
		cfg.Upstream.Ask = "wildcard"
	}
	cfg.Upstream.Backoff.Initial = 20 * time.Millisecond
	cfg.Upstream.Backoff.Max = 200 * time.Millisecond
	// A delta client holding a Cluster's endpoints is told of the Cluster's
	// removal once the endpoints' removal came, or after this wait (the
	// removal order of docs/architecture.md); kept well inside a quiet
	// point's wait, even held once on each relay of a chain.
	cfg.Delta.ParentRemovalWait = 500 * time.Millisecond
	// Every client dials from 127.0.0.1, one peer to the relay: no
	// per-peer share or stream rate (-1: off).
	cfg.Limits.MaxStreamsPerPeer, cfg.Limits.MaxConnectionsPerPeer, cfg.Limits.NewClassesPerPeer = -1, -1, -1
	cfg.Limits.StreamsPerPeerPerSecond = -1
	return cfg
}

func startUpstream(cell Cell, log *zap.Logger, tmp string, resync time.Duration) (up *upstream, err error) {
	u := &upstream{cell: cell}
	defer func() {
		if err != nil {
			u.close()
			up = nil
		}
	}()
	switch cell.Upstream {
	case UpFile:
		u.dir = filepath.Join(tmp, "source")
		if err := os.MkdirAll(u.dir, 0o755); err != nil {
			return nil, err
		}
		// The file source refuses a state without any resource (an emptied
		// directory is a half-done deploy, not a deletion of everything), so
		// a resource of a type no schedule uses keeps every state the
		// schedules make servable, an empty one included.
		if err := u.writeAnchor(); err != nil {
			return nil, err
		}
		// Schedules delete a type's last resource as they like; the file
		// source refuses a removal that empties a type unless a file
		// declares it empty (filesource.ErrTypesEmptied): each is declared.
		for _, t := range shortTypes {
			decl := fmt.Sprintf(`{"type_url":%q,"resources":[]}`, xdstest.Long(t))
			if err := os.WriteFile(filepath.Join(u.dir, "empty-"+t+".json"), []byte(decl), 0o644); err != nil {
				return nil, err
			}
		}
		cfg := relayConfig("", false, "relay-file", false, resync)
		cfg.Source.Dir = u.dir
		if err := u.startRelay(cfg, log.Named("relay")); err != nil {
			return nil, err
		}
		node := &corev3.Node{Id: "probe", Cluster: "conformance-probe"}
		if u.probe, err = xdstest.Dial(u.addr(), xdstest.Options{Node: node, ADS: true}); err != nil {
			return nil, err
		}
		return u, u.probe.Subscribe(runtimeType, xdstest.Sub{Names: []string{anchorName}})
	case UpSite:
		if u.site, err = xdstest.StartSiteWildcard(xdstest.SWOptions{}); err != nil {
			return nil, err
		}
		cfg := relayConfig(u.site.Addr, cell.Delta, "relay", false, resync)
		cfg.Upstream.Wildcard = "site_specific"
		return u, u.startRelay(cfg, log.Named("relay"))
	case UpChain:
		if u.cp, err = xdstest.StartControlPlane(xdstest.CPOptions{Cache: xdstest.Snapshot}); err != nil {
			return nil, err
		}
		if err := u.startRelay(relayConfig(u.cp.Addr, cell.Delta, "relay-tier1", cell.AskWildcard, resync), log.Named("tier1")); err != nil {
			return nil, err
		}
		return u, u.startRelay(relayConfig(u.addr(), cell.Delta, "relay-tier2", false, resync), log.Named("tier2"))
	default:
		if u.cp, err = xdstest.StartControlPlane(xdstest.CPOptions{Cache: cell.Upstream}); err != nil {
			return nil, err
		}
		return u, u.startRelay(relayConfig(u.cp.Addr, cell.Delta, "relay", cell.AskWildcard, resync), log.Named("relay"))
	}
}

// startRelay starts a relay of cfg in front of the others: it becomes the
// one serving the clients.
func (u *upstream) startRelay(cfg app.Config, log *zap.Logger) error {
	r, err := app.Start(cfg, log)
	if err != nil {
		return err
	}
	u.relays = append(u.relays, r)
	return nil
}

// addr is where clients connect.
func (u *upstream) addr() string { return u.relays[len(u.relays)-1].Addr() }

func (u *upstream) set(t, name string, gen int) error {
	typeURL := xdstest.Long(t)
	res := xdstest.Resource(typeURL, name, gen)
	if u.site != nil {
		return u.site.Set(typeURL, siteOnDemand(t, name), res)
	}
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
	if u.site != nil {
		u.site.Delete(xdstest.Long(t), name)
		return nil
	}
	if u.cp != nil {
		return u.cp.Delete(xdstest.Long(t), name)
	}
	err := os.Remove(filepath.Join(u.dir, fileName(t, name)))
	if os.IsNotExist(err) {
		return nil
	}
	return err
}

// writeAnchor writes the anchor at anchorGen, aside and renamed.
func (u *upstream) writeAnchor() error {
	anchor := fmt.Sprintf(`{"resources":[{"@type":%q,"name":%q,"layer":{"gen":%d}}]}`, runtimeType, anchorName, u.anchorGen)
	tmp := filepath.Join(u.dir, ".anchor.json")
	if err := os.WriteFile(tmp, []byte(anchor), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(u.dir, "anchor.json"))
}

// settle returns once the relay serves every change the schedule made to
// its source, within wait. A control plane's changes are served as they
// are made; the file source reloads its directory after a debounce, so a
// quiet point could otherwise pass before a change was loaded at all (a
// class with no client holding the name has nothing to wait for), and a
// client subscribing later would be served an older generation. The
// anchor is written after every other change: once the probe holds its
// new generation, the source has loaded the directory with all of them.
func (u *upstream) settle(wait time.Duration) error {
	if u.probe == nil {
		return nil
	}
	u.anchorGen++
	if err := u.writeAnchor(); err != nil {
		return err
	}
	want := u.anchorGen
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if !u.probe.WaitFor(ctx, func(c *xdstest.Client) bool { return anchorGen(c.Held(runtimeType)[anchorName]) == want }) {
		return fmt.Errorf("the file source did not load anchor generation %d within %v", want, wait)
	}
	return nil
}

// anchorGen reads the generation of a held anchor (-1: none).
func anchorGen(a *anypb.Any) int {
	var rt runtimev3.Runtime
	if a == nil || a.UnmarshalTo(&rt) != nil {
		return -1
	}
	return int(rt.GetLayer().GetFields()["gen"].GetNumberValue())
}

func (u *upstream) restart() error {
	if u.cp == nil {
		return nil
	}
	return u.cp.Restart()
}

func (u *upstream) close() {
	if u.probe != nil {
		u.probe.Close()
	}
	for i := len(u.relays) - 1; i >= 0; i-- {
		u.relays[i].Close()
	}
	if u.cp != nil {
		u.cp.Stop()
	}
	if u.site != nil {
		u.site.Close()
	}
}
