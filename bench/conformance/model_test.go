package conformance

import (
	"testing"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// TestModelCheck pins what the model accepts, exception by exception.
func TestModelCheck(t *testing.T) {
	wild := xdstest.Sub{Wildcard: true}
	for _, tc := range []struct {
		name             string
		absenceUnknownER bool
		typ              string
		view             ClientView
		ok               bool
	}{
		{"exact", false, "C", ClientView{Delta: true, Sub: wild, Held: map[string]int{"c1": 2}}, true},
		{"old generation", false, "C", ClientView{Delta: true, Sub: wild, Held: map[string]int{"c1": 1}}, false},
		{"missing", false, "C", ClientView{Delta: true, Sub: wild, Held: map[string]int{}}, false},
		{"deleted cluster held", true, "C", ClientView{Sub: wild, Held: map[string]int{"c1": 2, "c2": 1}}, false},
		{"named subset", false, "C", ClientView{Sub: xdstest.Sub{Names: []string{"c1", "x"}}, Held: map[string]int{"c1": 2}}, true},
		{"deleted endpoint, delta client, delta upstream", false, "E", ClientView{Delta: true, Sub: wild, Held: map[string]int{"e1": 1}}, false},
		{"deleted endpoint, delta client, SotW upstream (architecture.md removal rule)", true, "E", ClientView{Delta: true, Sub: wild, Held: map[string]int{"e1": 1}}, true},
		{"deleted endpoint, SotW client (spec: no SotW deletion)", false, "E", ClientView{Sub: wild, Held: map[string]int{"e1": 1}}, true},
		{"deleted endpoint at a content it never had", true, "E", ClientView{Sub: wild, Held: map[string]int{"e1": 7}}, false},
		{"NACKed the model's content", false, "C", ClientView{Delta: true, Sub: wild, Held: map[string]int{"c1": 1}, Rejected: map[string]int{"c1": 2}}, true},
		{"deleted endpoint kept at the content before a NACK", true, "E", ClientView{Delta: true, Sub: wild, Held: map[string]int{"e1": 7}, Rejected: map[string]int{"e1": 8}}, true},
		{"deleted cluster kept at the content before a NACK", true, "C", ClientView{Delta: true, Sub: wild, Held: map[string]int{"c1": 2, "c2": 1}, Rejected: map[string]int{"c2": 2}}, false},
		{"NACKed another content", false, "C", ClientView{Delta: true, Sub: wild, Held: map[string]int{"c1": 1}, Rejected: map[string]int{"c1": 3}}, false},
		{"NACKed the deletion", false, "C", ClientView{Delta: true, Sub: wild, Held: map[string]int{"c1": 2, "c2": 1}, Rejected: map[string]int{"c2": 0}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewModel(tc.absenceUnknownER)
			m.Set("C", "c1", 1)
			m.Set("C", "c1", 2)
			m.Set("C", "c2", 1)
			m.Set("E", "e1", 1)
			m.Quiet(func(string, string, string) bool { return true })
			m.Delete("C", "c2")
			m.Delete("E", "e1")
			if tc.view.Rejected == nil {
				tc.view.Rejected = map[string]int{}
			}
			got := m.Check(tc.typ, tc.view)
			if (len(got) == 0) != tc.ok {
				t.Errorf("Check = %q, want ok=%v", got, tc.ok)
			}
		})
	}
}

// TestModelLingerPerClass pins the staleER exception per class: a quiet
// point proves a class current only in what its clients cover. A class
// whose clients left (snapshot-sotw-stale-route-rejoin.json) may have been
// answered before a change and after the deletion that followed it, and
// keep the content before the change.
func TestModelLingerPerClass(t *testing.T) {
	m := NewModel(true)
	m.Join("a")
	m.Join("b")
	m.Set("R", "r2", 3)
	m.Quiet(func(string, string, string) bool { return true }) // both classes hold r2 at 3
	m.Set("R", "r2", 4)
	m.Quiet(func(class, _, _ string) bool { return class == "a" }) // class b has no client
	m.Join("c")                                                    // asks its upstream now: r2 at 4
	m.Delete("R", "r2")
	wild := xdstest.Sub{Wildcard: true}
	for _, tc := range []struct {
		class string
		gen   int
		ok    bool
	}{
		{"b", 3, true},  // never sent 4: the SotW upstream answered before and after it
		{"b", 4, true},  // or sent it
		{"a", 3, false}, // checked holding 4 at the last quiet point
		{"a", 4, true},
		{"c", 3, false}, // no client before the last quiet point: asked after it
	} {
		got := m.Check("R", ClientView{Class: tc.class, Delta: true, Sub: wild, Held: map[string]int{"r2": tc.gen}, Rejected: map[string]int{}})
		if (len(got) == 0) != tc.ok {
			t.Errorf("class %s holding r2 at %d: Check = %q, want ok=%v", tc.class, tc.gen, got, tc.ok)
		}
	}
}

// TestGenerateHonoursExclusions checks a cell's excluded features never
// appear in its schedules, and that a seed always gives the same schedule.
func TestGenerateHonoursExclusions(t *testing.T) {
	for _, cell := range Cells() {
		o := genOptions(cell, 200, false, nil)
		for seed := uint64(1); seed <= 20; seed++ {
			s := Generate(cell.Name, seed, o)
			if again := Generate(cell.Name, seed, o); string(again.JSON()) != string(s.JSON()) {
				t.Fatalf("%s seed %d: not deterministic", cell.Name, seed)
			}
			classWild := map[int]bool{}
			for _, st := range s.Steps {
				if (st.Op == "restart" && o.Exclude[FRestart]) || (st.Op == "delete" && o.Exclude[FDelete]) {
					t.Fatalf("%s seed %d: %s excluded", cell.Name, seed, st)
				}
				if st.Op == "join" {
					classWild[st.Client] = st.Class == "a"
				}
				if o.Exclude[FShrink] && (st.Op == "leave" || st.Op == "reconnect") {
					t.Fatalf("%s seed %d: %s with %s excluded", cell.Name, seed, st, FShrink)
				}
				if st.Op == "restart" && !cell.canRestart() {
					t.Fatalf("%s seed %d: %s", cell.Name, seed, st)
				}
				if st.Op != "sub" {
					continue
				}
				sub := st.Sub
				if o.Exclude[FMix] && (sub.Wildcard && len(sub.Names) > 0 || sub.Wildcard != classWild[st.Client]) {
					t.Fatalf("%s seed %d: %s mixes wildcard and names in a class", cell.Name, seed, st)
				}
				if o.Exclude[FEmptyName] && len(sub.Names) == 1 && sub.Names[0] == "" {
					t.Fatalf("%s seed %d: %s", cell.Name, seed, st)
				}
				if o.Exclude[FNames] && !sub.Wildcard && len(sub.Names) > 0 {
					t.Fatalf("%s seed %d: %s with names excluded", cell.Name, seed, st)
				}
			}
		}
	}
}

// With a site-specific wildcard a wildcard client must hold the wildcard's
// set and not the names it leaves out, unless a client of its class asks
// for one by name (the relay may not tell it from the wildcard's own); a
// client asking "*" and the name must hold both.
func TestModelSiteWildcard(t *testing.T) {
	m := NewSiteModel(false, siteOnDemand)
	m.Join("a")
	m.Set("C", "c1", 1)
	m.Set("C", "c3", 2) // on demand
	wild := xdstest.Sub{Wildcard: true}
	both := xdstest.Sub{Wildcard: true, Names: []string{"c3"}}
	for _, tc := range []struct {
		name  string
		sub   xdstest.Sub
		held  map[string]int
		named bool // a client of the class asked c3 by name
		ok    bool
	}{
		{"wildcard, its set", wild, map[string]int{"c1": 1}, false, true},
		{"wildcard, an on-demand name nobody asks", wild, map[string]int{"c1": 1, "c3": 2}, false, false},
		{"wildcard, an on-demand name a client asks", wild, map[string]int{"c1": 1, "c3": 2}, true, true},
		{"wildcard, an on-demand name at an old content", wild, map[string]int{"c1": 1, "c3": 1}, true, false},
		{"wildcard, lacking its set", wild, map[string]int{}, false, false},
		{"wildcard and the name", both, map[string]int{"c1": 1, "c3": 2}, true, true},
		{"wildcard and the name, lacking it", both, map[string]int{"c1": 1}, true, false},
	} {
		m := NewSiteModel(false, siteOnDemand)
		m.Set("C", "c1", 1)
		m.Set("C", "c3", 2)
		if tc.named {
			m.Asked("a", "C", []string{"c3"})
		}
		v := ClientView{Class: "a", Sub: tc.sub, Held: tc.held}
		if got := m.Check("C", v); (len(got) == 0) != tc.ok {
			t.Errorf("%s: problems %q, want ok %v", tc.name, got, tc.ok)
		}
	}
	// A wildcard client that NACKed the state leaving an on-demand name out
	// keeps it (rejected).
	nacked := ClientView{Class: "a", Sub: wild, Held: map[string]int{"c1": 1, "c3": 2}, Rejected: map[string]int{"c3": 0}}
	if got := m.Check("C", nacked); len(got) != 0 {
		t.Errorf("NACKed the state without c3: problems %q", got)
	}
	if got := m.Want("C", wild); got != "{c1:1}" {
		t.Errorf("Want(*) = %s, want {c1:1}", got)
	}
}
