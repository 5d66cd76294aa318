package bench

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
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
//	parent: set VERSION CHANGED       child: ok | error MESSAGE
//	parent: counts                    child: counts STREAMS REQUESTS | error MESSAGE
//
// "set" installs every class's state of the given version (CHANGED as in
// ControlPlane.SetClusters) and returns once the server has it. The child
// exits when its stdin closes, so it never outlives the parent.

// servedTarget is a server a child process runs for the parent.
type servedTarget interface {
	Addr() string
	set(version string, changed int) error
	counts() (streams, requests int)
	stop()
}

// Serve is the child side: it parses args (the flags serveArgs writes),
// runs the server and answers commands from in on out until in ends.
func Serve(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("xds-bench serve", flag.ContinueOnError)
	cacheKind := fs.String("cache", "snapshot", "go-control-plane cache (kind controlplane)")
	classes := fs.Int("classes", 1, "node classes")
	clusters := fs.Int("clusters", 1000, "clusters in each class's state")
	if len(args) == 0 {
		return fmt.Errorf("serve: want a kind: %s, %s or %s", ServeControlPlane, ServeLimit, ServeTCP)
	}
	kind := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	var t servedTarget
	switch kind {
	case ServeControlPlane:
		cp, err := StartControlPlane(*cacheKind)
		if err != nil {
			return err
		}
		t = &servedControlPlane{cp: cp, classes: *classes, clusters: *clusters}
	case ServeLimit:
		s, err := startLimitServer()
		if err != nil {
			return err
		}
		t = &servedBytes{bytesServer: s, clusters: *clusters}
	case ServeTCP:
		s, err := startTCPServer()
		if err != nil {
			return err
		}
		t = &servedBytes{bytesServer: s, clusters: *clusters}
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

// execute runs one command line and returns the reply line.
func execute(t servedTarget, line string) string {
	f := strings.Fields(line)
	switch {
	case len(f) == 3 && f[0] == "set":
		changed, err := strconv.Atoi(f[2])
		if err != nil {
			return "error " + err.Error()
		}
		if err := t.set(f[1], changed); err != nil {
			return "error " + err.Error()
		}
		return "ok"
	case len(f) == 1 && f[0] == "counts":
		s, r := t.counts()
		return fmt.Sprintf("counts %d %d", s, r)
	}
	return fmt.Sprintf("error unknown command %q", line)
}

// servedControlPlane is the direct target's child: go-control-plane itself.
type servedControlPlane struct {
	cp                *ControlPlane
	classes, clusters int
}

func (s *servedControlPlane) Addr() string { return s.cp.Addr }

func (s *servedControlPlane) set(version string, changed int) error {
	return setAllClasses(s.cp, s.classes, version, s.clusters, changed)
}

func (s *servedControlPlane) counts() (int, int) { return s.cp.Counts() }
func (s *servedControlPlane) stop()              { s.cp.Stop() }

// setAllClasses installs a state of version in every class of cp. The
// linear cache has one resource set for every class, so it is set once:
// setting it per class would push the same change once per class.
func setAllClasses(cp *ControlPlane, classes int, version string, clusters, changed int) error {
	if cp.kind == "linear" {
		classes = 1
	}
	for k := range classes {
		if err := cp.SetClusters(className(k), version, clusters, changed); err != nil {
			return err
		}
	}
	return nil
}

// bytesServer is a server writing pre-encoded payloads: limit or tcp.
type bytesServer interface {
	Addr() string
	publish(*payloads)
	counts() (streams, requests int)
	stop()
}

// servedBytes encodes each state once and publishes it (every class's
// state is the same, so the bytes are too).
type servedBytes struct {
	bytesServer
	clusters int
	last     *payloads
}

func (s *servedBytes) set(_ string, changed int) error {
	p, err := encodeState(s.clusters, changed, s.last)
	if err != nil {
		return err
	}
	s.last = p
	s.publish(p)
	return nil
}
