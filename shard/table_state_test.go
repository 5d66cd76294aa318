package shard

import (
	"slices"
	"testing"
	"time"
)

// The transitions written on pendingName: a wanted name waits until asked
// for; once asked it waits for an answer, and with grace until its deadline.
func TestPendingNameTransitions(t *testing.T) {
	now := time.Unix(1000, 0)
	p := pendingNames{}
	p.want("grace")
	p.want("nograce")
	p.want("unasked")
	if d := p.ask("grace", true, now); !d.Equal(now.Add(PendingGrace)) {
		t.Fatalf("ask with grace: deadline %v", d)
	}
	if d := p.ask("nograce", false, now); !d.IsZero() {
		t.Fatalf("ask without grace: deadline %v", d)
	}
	if d := p.ask("grace", true, now.Add(time.Second)); !d.IsZero() || !p["grace"].deadline.Equal(now.Add(PendingGrace)) {
		t.Fatalf("asking again restarted the wait: %v %+v", d, p["grace"])
	}
	later := now.Add(PendingGrace)
	for n, want := range map[string]bool{"grace": false, "nograce": true, "unasked": true} {
		if got := p[n].waiting(later); got != want {
			t.Fatalf("%s waiting at the deadline = %v, want %v", n, got, want)
		}
	}
	if got := p.expire(later); !slices.Equal(got, []string{"grace"}) {
		t.Fatalf("expire = %v", got)
	}
	p.unwanted("nograce") // asked: its answer is still due
	if _, ok := p["nograce"]; !ok {
		t.Fatal("unwanted dropped a name already asked for")
	}
	if got := p.answerCame(); !slices.Equal(got, []string{"nograce"}) {
		t.Fatalf("answerCame = %v (a wanted name is not answered by it)", got)
	}
	if !p.told("unasked") || p.told("unasked") || len(p) != 0 {
		t.Fatalf("told: %v", p)
	}
}

// The transitions written on upstreamState's phase.
func TestUpstreamStatePhases(t *testing.T) {
	var u upstreamState
	if u.hasAnswered() || u.servesWildcard() {
		t.Fatal("a new table serves")
	}
	u.ask(Subscription{Wildcard: true}, false) // the first wildcard: not re-asked
	if u.wildcardAwaited() {
		t.Fatal("first wildcard counted as re-asked")
	}
	if !u.answer(UpdateFull, "") || !u.servesWildcard() || !u.absenceKnown {
		t.Fatalf("after the first answer: %+v", u)
	}
	u.ask(NewSubscription([]string{"a"}, false), false)
	if u.servesWildcard() || !u.unaskedName("b") || u.unaskedName("a") {
		t.Fatalf("after asking for names: %+v", u)
	}
	u.ask(Subscription{Wildcard: true}, false)
	if !u.wildcardAwaited() || u.servesWildcard() {
		t.Fatalf("wildcard asked anew: %+v", u)
	}
	if !u.answer(UpdateMerge, "v") || u.wildcardAwaited() || u.absenceKnown || u.version != "v" {
		t.Fatalf("after the wildcard's answer: %+v", u)
	}
	if u.answer(UpdateIncremental, "") || !u.absenceKnown {
		t.Fatalf("a later answer serves all again, or absence unknown: %+v", u)
	}

	var silent upstreamState
	silent.ask(NewSubscription([]string{"a"}, false), true)
	silent.silentThroughGrace(false)
	if !silent.hasAnswered() || !silent.absenceKnown {
		t.Fatalf("silence through the grace (incremental): %+v", silent)
	}
	var source upstreamState // never reports what it is asked
	source.answer(UpdateFull, "")
	if !source.servesWildcard() || !source.askedForNothing() {
		t.Fatalf("a complete source: %+v", source)
	}
}
