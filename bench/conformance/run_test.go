package conformance

import (
	"context"
	"errors"
	"testing"

	"github.com/xds-relay/xds-relay/bench/xdstest"
)

// scriptedClient is a client that goes through states, one per response:
// each time its wait looks, it is at the next one. A response may be on its
// way as the wait ends (arriving): it is then at the state after the one
// the wait accepted.
type scriptedClient struct {
	states   []string // what the check finds in each state ("": conforms)
	at       int
	arriving bool
	err      error
}

func (c *scriptedClient) WaitFor(_ context.Context, cond func(*xdstest.Client) bool) bool {
	for ; ; c.at++ {
		if cond(nil) {
			if c.arriving && c.at+1 < len(c.states) {
				c.at++
			}
			return true
		}
		if c.at+1 == len(c.states) {
			return false // the wait ended: no more responses
		}
	}
}

func (c *scriptedClient) Err() error { return c.err }

// TestJudgeJudgesTheStateThatEndedTheWait: a quiet point reports what the
// client held when its wait ended, not what a response on its way changed
// it to right after (seed 9001138: a delta client conformed holding l1,
// then got l2, an older state the relay learnt late, with its removal right
// behind it; the report, checked again, found l2).
func TestJudgeJudgesTheStateThatEndedTheWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		states   []string
		arriving bool
		err      error
		want     string
	}{
		{"conforms at once", []string{""}, false, nil, ""},
		{"conforms, then an older state arrives", []string{"", "holds l2", ""}, true, nil, ""},
		{"conforms late", []string{"holds l2", "holds l2", ""}, false, nil, ""},
		{"never conforms", []string{"holds l2", "holds l2 at 1"}, false, nil, "holds l2 at 1"},
		{"stream ended", []string{"stream ended"}, false, errors.New("EOF"), "stream ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &scriptedClient{states: tc.states, arriving: tc.arriving, err: tc.err}
			got := judge(context.Background(), c, func() string { return c.states[c.at] })
			if got != tc.want {
				t.Errorf("judge = %q, want %q", got, tc.want)
			}
		})
	}
}
