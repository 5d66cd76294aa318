package bench

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/xds-relay/xds-relay/shard/wire"
)

// Server kinds a measured child process can run (xds-bench serve KIND).
const (
	ServeControlPlane = "controlplane" // go-control-plane: the direct target
	ServeLimit        = "limit"        // bare gRPC, pre-encoded bytes
	ServeTCP          = "tcp"          // plain TCP, the same bytes
)

// The child protocol, on the child's stdin and stdout, one line each way:
//
//	child:  listening ADDR            (once, when clients may connect)
//	parent: set VERSION CHANGED       child: ok UNIXNANO | error MESSAGE
//	parent: counts                    child: counts STREAMS REQUESTS | error MESSAGE
//	parent: eds CLASS SEQ             child: ok UNIXNANO | error MESSAGE
//	parent: prepare VERSION CHANGED   child: ok | error MESSAGE
//	parent: sent CLASS TYPE VERSION   child: ok UNIXNANO COUNT | error MESSAGE
//
// "set" installs every class's state of the given version (CHANGED as in
// ControlPlane.SetClusters) and returns once the server has it. The child
// exits when its stdin closes, so it never outlives the parent. UNIXNANO is
// the child's clock when it had handed the new state to its streams: the
// parent reads the reply only when the child gets the CPU to write it,
// which with thousands of streams to write is long after. "eds"
// installs churn update SEQ of class number CLASS's load assignment
// (Assignment). "prepare" lets a server do the work of a later "set" of the
// same arguments that is not serving (the limit and tcp servers encode the
// state), so that what the bench measures from "set" on is the serving.
// "sent" asks the control plane when it finished sending (gRPC's Send
// returned) the first response of VERSION of TYPE to a stream of class
// number CLASS, and how many it sent (0 0: none; the limit and tcp servers,
// their own senders, answer so): the relay target's control plane as a
// child (FanoutConfig.ControlPlaneChild).

// servedTarget is a server a child process runs for the parent.
type servedTarget interface {
	Addr() string
	set(version string, changed int) error
	// installedAt is when the last set installed each class's state when
	// it paced the classes (pace.go); nil when it installed them at once.
	installedAt() []time.Time
	prepare(version string, changed int) error
	setAssignment(class, seq int) error
	counts() (streams, requests int)
	// sent is when the server finished sending version of typeURL to a
	// stream of class, and how many such responses it sent (0: none).
	sent(class int, typeURL, version string) (time.Time, int)
	stop()
}

// Serve is the child side: it parses args (the flags serveArgs writes),
// runs the server and answers commands from in on out until in ends.
func Serve(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("xds-bench serve", flag.ContinueOnError)
	cacheKind := fs.String("cache", "snapshot", "go-control-plane cache (kind controlplane)")
	classes := fs.Int("classes", 1, "node classes")
	clusters := fs.Int("clusters", 1000, "clusters in each class's state")
	overlap := fs.Float64("overlap", 1, "fraction of each class's clusters identical across classes")
	pace := fs.Duration("pace", 0, "an update installs class k's state k × pace after it began (pace.go)")
	if len(args) == 0 {
		return fmt.Errorf("serve: want a kind: %s, %s or %s", ServeControlPlane, ServeLimit, ServeTCP)
	}
	kind := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	w := Workload{Classes: *classes, Clusters: *clusters, Overlap: *overlap}
	var t servedTarget
	switch kind {
	case ServeControlPlane:
		cp, err := StartControlPlane(*cacheKind)
		if err != nil {
			return err
		}
		cp.SetPace(*pace)
		t = &servedControlPlane{cp: cp, w: w}
	case ServeLimit:
		s, err := startLimitServer()
		if err != nil {
			return err
		}
		t = &servedBytes{bytesServer: s, w: w, pace: *pace}
	case ServeTCP:
		s, err := startTCPServer()
		if err != nil {
			return err
		}
		t = &servedBytes{bytesServer: s, w: w, pace: *pace}
	default:
		return fmt.Errorf("serve: unknown kind %q", kind)
	}
	defer t.stop()
	if _, err := fmt.Fprintf(out, "listening %s\n", t.Addr()); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if _, err := fmt.Fprintln(out, execute(t, sc.Text())); err != nil {
			return err
		}
	}
	return sc.Err()
}

// execute runs one command line and returns the reply line. A change made
// ("set", "eds") is answered with the instant it was made.
func execute(t servedTarget, line string) string {
	f := strings.Fields(line)
	if len(f) == 1 && f[0] == "counts" {
		s, r := t.counts()
		return fmt.Sprintf("counts %d %d", s, r)
	}
	unknown := fmt.Sprintf("error unknown command %q", line)
	if len(f) == 4 && f[0] == "sent" {
		var reply string
		err := withInt(f[1], func(class int) error {
			at, n := t.sent(class, f[2], f[3])
			ns := int64(0)
			if n > 0 {
				ns = at.UnixNano()
			}
			reply = fmt.Sprintf("ok %d %d", ns, n)
			return nil
		})
		if err != nil {
			return "error " + err.Error()
		}
		return reply
	}
	if len(f) != 3 {
		return unknown
	}
	var err error
	switch f[0] {
	case "set":
		if err = withInt(f[2], func(changed int) error { return t.set(f[1], changed) }); err == nil {
			return okAt(time.Now(), t.installedAt())
		}
	case "prepare":
		if err = withInt(f[2], func(changed int) error { return t.prepare(f[1], changed) }); err == nil {
			return "ok"
		}
	case "eds":
		err = withInt(f[1], func(class int) error {
			return withInt(f[2], func(seq int) error { return t.setAssignment(class, seq) })
		})
	default:
		return unknown
	}
	if err != nil {
		return "error " + err.Error()
	}
	return okAt(time.Now(), nil)
}

// okAt is the reply to a change made at end, its classes' states
// installed at classes (none: all at end): "ok END [CLASS0 …]", in
// nanoseconds since the epoch.
func okAt(end time.Time, classes []time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ok %d", end.UnixNano())
	for _, at := range classes {
		fmt.Fprintf(&b, " %d", at.UnixNano())
	}
	return b.String()
}

// withInt calls do with the number s spells.
func withInt(s string, do func(int) error) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	return do(n)
}

// servedControlPlane is the direct target's child: go-control-plane itself.
type servedControlPlane struct {
	cp *ControlPlane
	w  Workload
}

func (s *servedControlPlane) Addr() string { return s.cp.Addr }

func (s *servedControlPlane) set(version string, changed int) error {
	return s.cp.SetClasses(s.w, version, changed)
}

func (s *servedControlPlane) installedAt() []time.Time { return s.cp.InstalledAt() }

// prepare does nothing: go-control-plane builds its responses when it has
// the snapshot.
func (s *servedControlPlane) prepare(string, int) error { return nil }

func (s *servedControlPlane) setAssignment(class, seq int) error {
	return s.cp.SetAssignment(className(class), seq)
}

func (s *servedControlPlane) counts() (int, int) { return s.cp.Counts() }
func (s *servedControlPlane) stop()              { s.cp.Stop() }

func (s *servedControlPlane) sent(class int, typeURL, version string) (time.Time, int) {
	return s.cp.SentAt(className(class), typeURL, version)
}

// bytesServer is a server writing pre-encoded payloads: limit or tcp.
type bytesServer interface {
	Addr() string
	publish(class int, p *payloads)
	publishEDS(class int, body wire.Body)
	counts() (streams, requests int)
	stop()
}

// servedBytes encodes each class's state once and publishes it; when every
// class's state is the same (overlap 1), it is encoded once for all.
type servedBytes struct {
	bytesServer
	w    Workload
	pace time.Duration     // between classes (pace.go)
	at   []time.Time       // when the last paced set published each class
	last map[int]*payloads // per class; -1: every class's
	// prepared is the encoded state of a "prepare" not yet set.
	prepared    map[int]*payloads
	preparedFor string // its version and changed
}

func (s *servedBytes) set(version string, changed int) error {
	next := s.prepared
	if s.preparedFor != fmt.Sprint(version, changed) {
		var err error
		if next, err = s.encode(changed); err != nil {
			return err
		}
	}
	s.prepared, s.preparedFor = nil, ""
	if s.pace > 0 {
		// Class by class, in turn: a uniform state too (it is then each
		// class's own until the next unpaced publication of every class's).
		start := time.Now()
		s.at = make([]time.Time, s.w.Classes)
		for k := range s.w.Classes {
			p := next[k]
			if p == nil {
				p = next[-1]
			}
			awaitTurn(start, k, s.pace)
			s.publish(k, p)
			s.at[k] = time.Now()
		}
	} else {
		s.at = nil // installedAt: at once
		for k, p := range next {
			s.publish(k, p)
		}
	}
	s.last = next
	return nil
}

func (s *servedBytes) installedAt() []time.Time { return s.at }

// sent: the limit and tcp servers are their own senders (installedAt).
func (s *servedBytes) sent(int, string, string) (time.Time, int) { return time.Time{}, 0 }

func (s *servedBytes) prepare(version string, changed int) error {
	p, err := s.encode(changed)
	if err != nil {
		return err
	}
	s.prepared, s.preparedFor = p, fmt.Sprint(version, changed)
	return nil
}

// encode encodes every class's state (once for all when they are the same),
// its delta diff against the current one.
func (s *servedBytes) encode(changed int) (map[int]*payloads, error) {
	classes := []int{-1}
	if !s.w.uniform() {
		classes = make([]int, s.w.Classes)
		for k := range classes {
			classes[k] = k
		}
	}
	out := make(map[int]*payloads, len(classes))
	for _, k := range classes {
		p, err := encodeClassState(s.w, max(k, 0), changed, s.last[k])
		if err != nil {
			return nil, err
		}
		out[k] = p
	}
	return out, nil
}

func (s *servedBytes) setAssignment(class, seq int) error {
	body, err := encodeAssignment(seq)
	if err != nil {
		return err
	}
	s.publishEDS(class, body)
	return nil
}
