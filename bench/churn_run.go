package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ChurnResult is what a sustained EDS churn run measured (FanoutConfig.
// Churn): every client holds its class's load assignment, and updates come
// at Rate per second, round robin over the classes. A latency is one
// client's receipt of one update, from the moment the bench gave the update
// to the server (raw) or from the moment its sender had sent it (after sent:
// for the relay, go-control-plane's Send of that update to the relay
// returned; for the other targets, their own "set" returned).
type ChurnResult struct {
	Rate     float64       `json:"rate"`        // updates per second asked for
	Duration time.Duration `json:"duration_ns"` // of the updating
	Updates  int           `json:"updates"`     // EDS updates made
	// Expected counts an (update, client) pair per update and client of
	// its class; Receipts those delivered; Superseded those never delivered
	// because a later update of the class reached the client first (SotW
	// streams send the latest state). Receipts + Superseded = Expected.
	Expected   int `json:"expected"`
	Receipts   int `json:"receipts"`
	Superseded int `json:"superseded"`
	// Delivered counts the updates every client of the class received.
	Delivered int `json:"delivered"`
	// SentTimed counts the updates whose sent instant is the upstream's
	// (the relay's control plane timed its Send); the others' is "set".
	SentTimed    int           `json:"sent_timed"`
	P50          time.Duration `json:"p50_ns"`
	P90          time.Duration `json:"p90_ns"`
	P99          time.Duration `json:"p99_ns"`
	Max          time.Duration `json:"max_ns"`
	AfterSentP50 time.Duration `json:"after_sent_p50_ns"`
	AfterSentP90 time.Duration `json:"after_sent_p90_ns"`
	AfterSentP99 time.Duration `json:"after_sent_p99_ns"`
	AfterSentMax time.Duration `json:"after_sent_max_ns"`
	ServerCPU    time.Duration `json:"server_cpu_ns"`    // from the first update until every client held the last
	ServerRSS    int64         `json:"server_rss_bytes"` // then
}

// churnRun drives the updates and collects the clients' EDS receipts.
type churnRun struct {
	cfg      FanoutConfig
	srv      target
	receipts chan Receipt // the clients' EDS receipts
	cancel   context.CancelFunc
	done     chan struct{} // the collector ended

	mu       sync.Mutex
	changed  chan struct{}  // guarded by mu: closed and replaced on every receipt
	byHash   map[uint64]int // guarded by mu: update seq of each content hash
	updates  []churnUpdate  // guarded by mu: by seq
	last     []int          // guarded by mu: per client, the last seq received (-1: none)
	arrivals []churnArrival // guarded by mu
	errs     []error        // guarded by mu: the first few protocol errors
}

type churnUpdate struct {
	class      int
	set, given time.Time // before the server was given it; when it had it
}

type churnArrival struct {
	seq int32
	at  time.Time
}

// startChurn installs every class's first load assignment (seq = class
// number) and starts collecting; the clients' EDS receipts go to receipts.
func startChurn(ctx context.Context, cfg FanoutConfig, srv target) (*churnRun, error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &churnRun{
		cfg: cfg, srv: srv, cancel: cancel, done: make(chan struct{}),
		receipts: make(chan Receipt, 2*cfg.Clients),
		changed:  make(chan struct{}),
		byHash:   make(map[uint64]int),
		last:     make([]int, cfg.Clients),
	}
	for i := range c.last {
		c.last[i] = -1
	}
	go c.collect(ctx)
	for k := range cfg.Classes {
		if err := c.update(ctx, k); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

func (c *churnRun) stop() {
	c.cancel()
	<-c.done
}

// update gives the server the next update of class k.
func (c *churnRun) update(ctx context.Context, k int) error {
	c.mu.Lock()
	seq := len(c.updates)
	c.mu.Unlock()
	h, err := AssignmentHash(seq)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.byHash[h] = seq
	c.updates = append(c.updates, churnUpdate{class: k, set: time.Now()})
	c.mu.Unlock()
	given, err := c.srv.setAssignment(ctx, k, seq)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.updates[seq].given = given
	c.mu.Unlock()
	return nil
}

func (c *churnRun) collect(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case r := <-c.receipts:
			c.record(r)
		case <-ctx.Done():
			return
		}
	}
}

func (c *churnRun) record(r Receipt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fail := func(format string, args ...any) {
		if len(c.errs) < 5 {
			c.errs = append(c.errs, fmt.Errorf("client %d: "+format, append([]any{r.Client}, args...)...))
		}
	}
	seq, ok := c.byHash[r.Hash]
	switch {
	case !ok || r.Resources != 1:
		fail("an EDS response of %d resources no update sent (hash %x)", r.Resources, r.Hash)
		return
	case c.updates[seq].class != r.Client%c.cfg.Classes:
		fail("update %d of class %d, not its class", seq, c.updates[seq].class)
		return
	case seq <= c.last[r.Client]:
		fail("update %d after update %d", seq, c.last[r.Client])
		return
	}
	c.last[r.Client] = seq
	c.arrivals = append(c.arrivals, churnArrival{seq: int32(seq), at: r.At})
	close(c.changed)
	c.changed = make(chan struct{})
}

// awaitCurrent waits (timeout at most) until every client holds its
// class's latest update.
func (c *churnRun) awaitCurrent(timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		latest := make([]int, c.cfg.Classes)
		for seq, u := range c.updates {
			latest[u.class] = seq
		}
		behind := 0
		for i, s := range c.last {
			if s != latest[i%c.cfg.Classes] {
				behind++
			}
		}
		err := errors.Join(c.errs...)
		changed := c.changed
		c.mu.Unlock()
		switch {
		case err != nil:
			return err
		case behind == 0:
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("%d of %d clients lack their class's latest load assignment after %v", behind, len(c.last), timeout)
		}
	}
}

func (c *churnRun) awaitInitial(timeout time.Duration) error { return c.awaitCurrent(timeout) }

// run makes cfg.Churn updates per second for cfg.ChurnDuration, waits for
// every client to hold its class's last one, and summarizes.
func (c *churnRun) run(ctx context.Context) (*ChurnResult, error) {
	c.mu.Lock()
	first := len(c.updates)
	c.arrivals = c.arrivals[:0] // the initial assignments are not measured
	c.mu.Unlock()
	before, err := c.srv.usage()
	if err != nil {
		return nil, err
	}
	c.cfg.Log("churn: %.0f EDS updates/s over %d classes for %v", c.cfg.Churn, c.cfg.Classes, c.cfg.ChurnDuration)
	interval := time.Duration(float64(time.Second) / c.cfg.Churn)
	start := time.Now()
	for j := 0; ; j++ {
		due := start.Add(time.Duration(j) * interval)
		if due.Sub(start) >= c.cfg.ChurnDuration {
			break
		}
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err := c.update(ctx, j%c.cfg.Classes); err != nil {
			return nil, err
		}
	}
	elapsed := time.Since(start)
	if err := c.awaitCurrent(c.cfg.Timeout); err != nil {
		return nil, err
	}
	after, err := c.srv.usage()
	if err != nil {
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	res := &ChurnResult{Rate: c.cfg.Churn, Duration: elapsed, Updates: len(c.updates) - first,
		ServerCPU: after.CPU - before.CPU, ServerRSS: after.RSS}
	perClass := make([]int, c.cfg.Classes) // clients of each class
	for i := range c.last {
		perClass[i%c.cfg.Classes]++
	}
	got := make([]int, len(c.updates)) // receipts per update
	raw := make([]time.Duration, 0, len(c.arrivals))
	afterSent := make([]time.Duration, 0, len(c.arrivals))
	sent := make([]time.Time, len(c.updates))
	for seq := first; seq < len(c.updates); seq++ {
		u := c.updates[seq]
		res.Expected += perClass[u.class]
		at, ok, err := c.srv.sentAt(ctx, u.class, EndpointType, AssignmentVersion(seq))
		if err != nil {
			return nil, err
		}
		if ok {
			res.SentTimed++
		} else {
			at = u.given
		}
		sent[seq] = at
	}
	for _, a := range c.arrivals {
		seq := int(a.seq)
		got[seq]++
		raw = append(raw, a.at.Sub(c.updates[seq].set))
		afterSent = append(afterSent, a.at.Sub(sent[seq]))
	}
	for seq := first; seq < len(c.updates); seq++ {
		if got[seq] == perClass[c.updates[seq].class] {
			res.Delivered++
		}
	}
	res.Receipts = len(raw)
	res.Superseded = res.Expected - res.Receipts
	if len(raw) == 0 {
		return nil, errors.New("no update was received")
	}
	slices.Sort(raw)
	slices.Sort(afterSent)
	q := func(d []time.Duration, p int) time.Duration { return d[(len(d)-1)*p/100] }
	res.P50, res.P90, res.P99, res.Max = q(raw, 50), q(raw, 90), q(raw, 99), raw[len(raw)-1]
	res.AfterSentP50, res.AfterSentP90, res.AfterSentP99, res.AfterSentMax = q(afterSent, 50), q(afterSent, 90), q(afterSent, 99), afterSent[len(afterSent)-1]
	return res, nil
}
