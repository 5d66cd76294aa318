package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/bench/xdstest"
	"github.com/xds-relay/xds-relay/shard"
)

// RunOptions bound a run.
type RunOptions struct {
	// Wait bounds how long a quiet point waits for every client to conform;
	// it must exceed shard.PendingGrace. 0: PendingGrace + 3 s.
	Wait time.Duration
	// Hold is how long after the final quiet point every client is checked
	// again (the relay's one timer, PendingGrace, fires within it).
	// 0: PendingGrace + 500 ms; negative: no hold.
	Hold time.Duration
	Log  *zap.Logger // the relays' logger; nil: none
	// Resync is the relays' upstream.resync_interval (0: its default, far
	// longer than a schedule): short, every class stream is replaced over
	// and over while the schedule runs.
	Resync time.Duration
	// Trace, if set, is told how long each quiet point took.
	Trace func(format string, args ...any)
}

// Divergence is a quiet point at which a client did not hold what the model
// says.
type Divergence struct {
	Step   int    // index of the quiet step
	Hold   bool   // seen during the final hold, after the clients had conformed
	Report string // what each non-conforming client held and should hold
}

func (d *Divergence) Error() string {
	return fmt.Sprintf("divergence at step %d:\n%s", d.Step, d.Report)
}

type runClient struct {
	join Step
	c    *xdstest.Client
}

// Run runs a schedule in a fresh cell: it returns a *Divergence if a client
// diverged from the model, another error if the run itself failed.
func Run(cell Cell, s Schedule, o RunOptions) error {
	if o.Wait == 0 {
		o.Wait = shard.PendingGrace + 3*time.Second
	}
	if o.Hold == 0 {
		o.Hold = shard.PendingGrace + 500*time.Millisecond
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	tmp, err := os.MkdirTemp("", "conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	up, err := startUpstream(cell, o.Log, tmp, o.Resync)
	if err != nil {
		return fmt.Errorf("start %s: %w", cell.Name, err)
	}
	defer up.close()
	model := NewModel(cell.absenceUnknownER())
	if cell.Upstream == UpSite {
		model = NewSiteModel(cell.absenceUnknownER(), siteOnDemand)
	}
	clients := map[int]*runClient{}
	defer func() {
		for _, rc := range clients {
			rc.c.Close()
		}
	}()
	for i, st := range s.Steps {
		rc := clients[st.Client]
		switch st.Op {
		case "join":
			if rc != nil {
				continue
			}
			node := &corev3.Node{Id: fmt.Sprintf("c%d", st.Client), Cluster: "class-" + st.Class}
			c, err := xdstest.Dial(up.addr(), xdstest.Options{Node: node, Delta: st.Delta, ADS: st.ADS})
			if err != nil {
				return err
			}
			clients[st.Client] = &runClient{join: st, c: c}
			model.Join(st.Class)
		case "leave":
			if rc != nil {
				rc.c.Close()
				delete(clients, st.Client)
			}
		case "sub":
			if rc == nil {
				continue
			}
			model.Asked(rc.join.Class, st.Type, st.Sub.Names)
			if err := rc.c.Subscribe(xdstest.Long(st.Type), st.Sub.sub()); err != nil && rc.c.Err() == nil && !errors.Is(err, xdstest.ErrNothingFirst) {
				return &Divergence{Step: i, Report: fmt.Sprintf("c%d: %s: %v", st.Client, st, err)}
			}
		case "nack":
			if rc != nil {
				rc.c.NACK(xdstest.Long(st.Type), 1)
			}
		case "reconnect":
			if rc != nil {
				if err := rc.c.Reconnect(); err != nil && rc.c.Err() == nil {
					return &Divergence{Step: i, Report: fmt.Sprintf("c%d: reconnect: %v", st.Client, err)}
				}
			}
		case "set":
			model.Set(st.Type, st.Name, st.Gen)
			if err := up.set(st.Type, st.Name, st.Gen); err != nil {
				return err
			}
		case "delete":
			model.Delete(st.Type, st.Name)
			if err := up.delete(st.Type, st.Name); err != nil {
				return err
			}
		case "restart":
			if err := up.restart(); err != nil {
				return err
			}
		case "quiet":
			began := time.Now()
			if err := up.settle(o.Wait); err != nil {
				return err
			}
			report := quiet(model, clients, o.Wait)
			if o.Trace != nil {
				o.Trace("quiet step %d took %v", i, time.Since(began))
			}
			if report != "" {
				return &Divergence{Step: i, Report: report}
			}
			model.Quiet(coveredBy(clients))
		default:
			return fmt.Errorf("step %d: unknown op %q", i, st.Op)
		}
	}
	if o.Hold > 0 {
		if report := hold(model, clients, o.Hold, o.Wait); report != "" {
			return &Divergence{Step: len(s.Steps) - 1, Hold: true, Report: "after conforming, during the final hold:\n" + report}
		}
	}
	return nil
}

// view decodes what a client holds of type t for the model.
func view(rc *runClient, t string) (ClientView, []string) {
	typeURL := xdstest.Long(t)
	// One snapshot: what it holds and what it rejected must be of the same
	// instant, or a response handled in between mixes them.
	st := rc.c.State(typeURL)
	v := ClientView{Class: rc.join.Class, Delta: rc.join.Delta, Sub: st.Sub, Held: map[string]int{}, Rejected: map[string]int{}}
	var problems []string
	decode := func(into map[string]int, m map[string]*anypb.Any) {
		for n, a := range m {
			if a == nil {
				into[n] = 0
				continue
			}
			name, gen, err := xdstest.Generation(a)
			if err != nil || name != n {
				problems = append(problems, fmt.Sprintf("%s %s: %v", t, n, err))
				continue
			}
			into[n] = gen
		}
	}
	decode(v.Held, st.Held)
	decode(v.Rejected, st.Rejected)
	return v, problems
}

// coveredBy reports, for Model.Quiet, whether a client of class subscribes
// to name of type t (by name or the wildcard).
func coveredBy(clients map[int]*runClient) func(class, t, name string) bool {
	return func(class, t, name string) bool {
		for _, rc := range clients {
			if rc.join.Class != class {
				continue
			}
			if sub := rc.c.Subscription(xdstest.Long(t)); sub.Wildcard || slices.Contains(sub.Names, name) {
				return true
			}
		}
		return false
	}
}

// problems returns what is wrong with a client now ("" if it conforms).
func problems(model *Model, id int, rc *runClient) string {
	var b strings.Builder
	if err := rc.c.Err(); err != nil {
		fmt.Fprintf(&b, "  stream ended: %v\n", err)
	}
	for _, t := range shortTypes {
		v, bad := view(rc, t)
		bad = append(bad, model.Check(t, v)...)
		if len(bad) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  %s sub %s: holds %s, model %s", t, v.Sub, renderGens(v.Held), model.Want(t, v.Sub))
		if len(v.Rejected) > 0 {
			fmt.Fprintf(&b, ", rejected %s", renderGens(v.Rejected))
		}
		fmt.Fprintf(&b, "\n    %s\n", strings.Join(bad, "\n    "))
	}
	if b.Len() == 0 {
		return ""
	}
	proto, svc := "sotw", "per-type"
	if rc.join.Delta {
		proto = "delta"
	}
	if rc.join.ADS {
		svc = "ads"
	}
	return fmt.Sprintf("client c%d (%s %s, class %s):\n%s", id, proto, svc, rc.join.Class, b.String())
}

// quiet waits for every client to conform, each within wait; it returns a
// report of those that did not.
func quiet(model *Model, clients map[int]*runClient, wait time.Duration) string {
	var report strings.Builder
	for _, id := range slices.Sorted(maps.Keys(clients)) {
		rc := clients[id]
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		p := judge(ctx, rc.c, func() string { return problems(model, id, rc) })
		cancel()
		if p != "" {
			report.WriteString(p)
			report.WriteString(eventTail(rc.c))
		}
	}
	return report.String()
}

// waiter is what a quiet point waits on: an xdstest.Client.
type waiter interface {
	WaitFor(ctx context.Context, cond func(*xdstest.Client) bool) bool
	Err() error
}

var _ waiter = (*xdstest.Client)(nil)

// judge waits until check finds nothing wrong with the client, its stream
// ends, or ctx does, and returns what check found in the state that ended
// the wait. Checking once more after the wait would judge a later state: a
// response on its way at the quiet point (an older state the relay learnt
// late, its correction right behind it) would be reported from a client
// that had conformed. States passed through after a client conformed are
// not judged at this quiet point (see hold).
func judge(ctx context.Context, w waiter, check func() string) string {
	var found string
	w.WaitFor(ctx, func(*xdstest.Client) bool {
		found = check()
		return found == "" || w.Err() != nil
	})
	return found
}

// hold lets d pass after the clients conformed, then checks them again:
// a state the relay changes later (its one timer, PendingGrace, fires
// within d) must still conform. States passed through in between are not
// judged: a client that had not been answered yet conforms trivially at
// the quiet point and may be answered from an older state first.
func hold(model *Model, clients map[int]*runClient, d, wait time.Duration) string {
	time.Sleep(d) // an observation window, not an ordering: nothing is expected to happen in it
	return quiet(model, clients, wait)
}

// eventTail renders the client's last responses.
func eventTail(c *xdstest.Client) string {
	log := c.Log()
	if len(log) > 12 {
		log = log[len(log)-12:]
	}
	var b strings.Builder
	b.WriteString("  last responses:\n")
	for _, e := range log {
		nack := ""
		if e.NACKed {
			nack = " NACKed"
		}
		fmt.Fprintf(&b, "    %s v=%s %v -%v%s\n", xdstest.Short(e.TypeURL), e.Version, e.Names, e.Removed, nack)
	}
	return b.String()
}

// IsDivergence reports whether err is a divergence (not a failed run).
func IsDivergence(err error) bool {
	var d *Divergence
	return errors.As(err, &d)
}
