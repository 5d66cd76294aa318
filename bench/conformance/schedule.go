package conformance

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// Step is one event of a schedule. Steps naming a client that is not
// connected (after shrinking dropped its join) are skipped.
type Step struct {
	Op     string   `json:"op"`               // join leave sub nack reconnect | set delete restart | quiet
	Client int      `json:"client,omitempty"` // client steps
	Class  string   `json:"class,omitempty"`  // join: the node's cluster (its class)
	Delta  bool     `json:"delta,omitempty"`  // join: incremental xDS
	ADS    bool     `json:"ads,omitempty"`    // join: one aggregated stream
	Type   string   `json:"type,omitempty"`   // sub, nack, set, delete: L R C E
	Sub    *SubSpec `json:"sub,omitempty"`    // sub
	Name   string   `json:"name,omitempty"`   // set, delete
	Gen    int      `json:"gen,omitempty"`    // set
}

// SubSpec is a subscription in a schedule.
type SubSpec struct {
	Wildcard bool     `json:"wildcard,omitempty"`
	Legacy   bool     `json:"legacy,omitempty"`
	Names    []string `json:"names,omitempty"`
}

func (s *SubSpec) sub() xdstest.Sub {
	return xdstest.Sub{Wildcard: s.Wildcard, Legacy: s.Legacy, Names: s.Names}
}

func (s Step) String() string {
	switch s.Op {
	case "join":
		proto, svc := "sotw", "per-type"
		if s.Delta {
			proto = "delta"
		}
		if s.ADS {
			svc = "ads"
		}
		return fmt.Sprintf("join c%d class=%s %s %s", s.Client, s.Class, proto, svc)
	case "leave", "reconnect":
		return fmt.Sprintf("%s c%d", s.Op, s.Client)
	case "sub":
		return fmt.Sprintf("sub c%d %s %s", s.Client, s.Type, s.Sub.sub())
	case "nack":
		return fmt.Sprintf("nack c%d %s", s.Client, s.Type)
	case "set":
		return fmt.Sprintf("set %s %s gen %d", s.Type, s.Name, s.Gen)
	case "delete":
		return fmt.Sprintf("delete %s %s", s.Type, s.Name)
	}
	return s.Op
}

// Schedule is a replayable run: the cell it ran in, the seed that
// generated it and its steps. A file under testdata holds one, with what
// it showed.
type Schedule struct {
	Cell  string `json:"cell"`
	Seed  uint64 `json:"seed"`
	Steps []Step `json:"steps"`
	// Open classifies a divergence not fixed yet (e.g. "issue 11 item 1");
	// empty when the schedule must conform.
	Open string `json:"open,omitempty"`
	// Note says what the schedule shows.
	Note string `json:"note,omitempty"`
}

// String lists the steps, one a line.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cell %s seed %d, %d steps:\n", s.Cell, s.Seed, len(s.Steps))
	for i, st := range s.Steps {
		fmt.Fprintf(&b, "  %2d %s\n", i, st)
	}
	return b.String()
}

// JSON renders the schedule as a testdata file, one step a line.
func (s Schedule) JSON() []byte {
	var b strings.Builder
	head, _ := json.Marshal(struct {
		Cell string `json:"cell"`
		Seed uint64 `json:"seed"`
		Open string `json:"open,omitempty"`
		Note string `json:"note,omitempty"`
	}{s.Cell, s.Seed, s.Open, s.Note})
	b.Write(head[:len(head)-1])
	b.WriteString(",\n\"steps\": [\n")
	for i, st := range s.Steps {
		line, _ := json.Marshal(st)
		b.Write(line)
		if i < len(s.Steps)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

// LoadSchedule reads a schedule file.
func LoadSchedule(path string) (Schedule, error) {
	var s Schedule
	data, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Feature is something a schedule may exercise; a cell may exclude some
// (see docs/conformance.md for which and why).
type Feature string

// Features the generator knows.
const (
	FLegacy    Feature = "legacy-wildcard"   // the legacy empty request
	FStar      Feature = "star"              // explicit "*" alone
	FNames     Feature = "names"             // named subscriptions
	FStarNames Feature = "star+names"        // "*" plus names (and legacy wildcard plus names)
	FNone      Feature = "unsubscribe-all"   // a subscription to nothing after names
	FEmptyName Feature = "empty-name"        // the name "" (a subscription some clients send to mean nothing)
	FNACK      Feature = "nack"              // a client NACKs its next response
	FReconnect Feature = "reconnect"         // a client reconnects with what it holds
	FRestart   Feature = "upstream-restart"  // the control plane restarts
	FDelete    Feature = "delete"            // upstream deletions
	FDelta     Feature = "delta-clients"     // incremental clients
	FSotW      Feature = "sotw-clients"      // state-of-the-world clients
	FPerType   Feature = "per-type-services" // clients on the per-type services
	// FMix: one class holds wildcard and named subscriptions of a type, at
	// once or one after the other. Excluded, class a subscribes only by
	// wildcard (legacy or "*") and class b only by names.
	FMix Feature = "wildcard-and-names-in-class"
	// FShrink: a class's interest in a name or the wildcard goes away and
	// may come back (unsubscriptions, clients leaving or reconnecting).
	// Excluded, subscriptions only grow and clients neither leave nor
	// reconnect.
	FShrink Feature = "interest-shrinks"
)

// Names of the resource pool: a few per type, plus one never created
// ("x") so subscriptions to absent names happen.
var pool = map[string][]string{
	"L": {"l1", "l2", "x"},
	"R": {"r1", "r2", "x"},
	"C": {"c1", "c2", "c3", "x"},
	"E": {"c1", "c2", "c3", "x"},
}

var shortTypes = []string{"C", "E", "L", "R"}

// GenOptions bound a generated schedule.
type GenOptions struct {
	Steps    int              // events (besides quiet points)
	Clients  int              // most clients connected at once
	Exclude  map[Feature]bool // features not to generate
	Restarts bool             // the cell can restart its upstream
}

// Generate builds the schedule of seed for a cell.
func Generate(cell string, seed uint64, o GenOptions) Schedule {
	// The cell's name is mixed in: each cell explores its own schedules.
	h := fnv.New64a()
	h.Write([]byte(cell))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	on := func(f Feature) bool { return !o.Exclude[f] }
	s := Schedule{Cell: cell, Seed: seed}
	add := func(st Step) { s.Steps = append(s.Steps, st) }
	gens := map[string]int{}
	set := func(t, name string) {
		gens[t+"/"+name]++
		add(Step{Op: "set", Type: t, Name: name, Gen: gens[t+"/"+name]})
	}
	// An initial state: most names of every type exist.
	for _, t := range shortTypes {
		for _, n := range pool[t] {
			if n != "x" && rng.IntN(4) > 0 {
				set(t, n)
			}
		}
	}
	var live []int
	next := 0
	classOf := map[int]string{}
	subs := map[int]map[string]*SubSpec{} // client -> type -> current subscription
	join := func() {
		next++
		c := next
		st := Step{Op: "join", Client: c, Class: []string{"a", "b"}[rng.IntN(2)], ADS: !on(FPerType) || rng.IntN(3) > 0}
		switch {
		case !on(FDelta):
		case !on(FSotW):
			st.Delta = true
		default:
			st.Delta = rng.IntN(2) == 0
		}
		classOf[c], subs[c] = st.Class, map[string]*SubSpec{}
		add(st)
		live = append(live, c)
	}
	sub := func(c int) {
		t := shortTypes[rng.IntN(len(shortTypes))]
		prev := subs[c][t]
		var kinds []Feature
		for _, f := range []Feature{FLegacy, FStar, FNames, FNames, FStarNames, FNone, FEmptyName} {
			if !on(f) {
				continue
			}
			wild := f == FLegacy || f == FStar || f == FStarNames
			if !on(FMix) && (f == FStarNames || (classOf[c] == "a") != wild) {
				continue
			}
			if !on(FShrink) && (f == FNone || f == FEmptyName || (prev != nil && prev.Wildcard && !wild)) {
				continue
			}
			kinds = append(kinds, f)
		}
		if len(kinds) == 0 {
			return
		}
		names := func() []string {
			var out []string
			for _, n := range pool[t] {
				if rng.IntN(2) == 0 || (!on(FShrink) && prev != nil && slices.Contains(prev.Names, n)) {
					out = append(out, n)
				}
			}
			if len(out) == 0 {
				out = []string{pool[t][rng.IntN(len(pool[t]))]}
			}
			return out
		}
		spec := &SubSpec{}
		switch kinds[rng.IntN(len(kinds))] {
		case FLegacy:
			spec.Wildcard, spec.Legacy = true, true
		case FStar:
			spec.Wildcard = true
		case FNames:
			spec.Names = names()
		case FStarNames:
			spec.Wildcard, spec.Names = true, names()
			spec.Legacy = rng.IntN(2) == 0
		case FNone:
		case FEmptyName:
			spec.Names = []string{""}
		}
		subs[c][t] = spec
		add(Step{Op: "sub", Client: c, Type: t, Sub: spec})
	}
	join()
	sub(live[0])
	for range o.Steps {
		r := rng.IntN(100)
		switch {
		case r < 12 && len(live) < o.Clients:
			join()
			sub(live[len(live)-1])
		case r < 17 && len(live) > 1 && on(FShrink):
			i := rng.IntN(len(live))
			add(Step{Op: "leave", Client: live[i]})
			live = slices.Delete(live, i, i+1)
		case r < 40 && len(live) > 0:
			sub(live[rng.IntN(len(live))])
		case r < 45 && len(live) > 0 && on(FNACK):
			add(Step{Op: "nack", Client: live[rng.IntN(len(live))], Type: shortTypes[rng.IntN(len(shortTypes))]})
		case r < 50 && len(live) > 0 && on(FReconnect) && on(FShrink):
			add(Step{Op: "reconnect", Client: live[rng.IntN(len(live))]})
		case r < 53 && o.Restarts && on(FRestart):
			add(Step{Op: "restart"})
		case r < 63 && on(FDelete):
			t := shortTypes[rng.IntN(len(shortTypes))]
			add(Step{Op: "delete", Type: t, Name: pool[t][rng.IntN(len(pool[t])-1)]})
		case r < 85:
			t := shortTypes[rng.IntN(len(shortTypes))]
			set(t, pool[t][rng.IntN(len(pool[t])-1)])
		default:
			add(Step{Op: "quiet"})
		}
	}
	add(Step{Op: "quiet"})
	return s
}
