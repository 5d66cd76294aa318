package ruleerr

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"testing"
)

func TestRuleErrorNamesRuleAndField(t *testing.T) {
	_, cause := regexp.Compile("(")
	err := fmt.Errorf("node classes: %w", New(2, "regex", cause))
	var re *RuleError
	if !errors.As(err, &re) || re.Index != 2 || re.Field != "regex" {
		t.Fatalf("errors.As(%v) = %+v, want rule 2, field regex", err, re)
	}
	if want := "rules[2].regex: " + cause.Error(); re.Error() != want {
		t.Errorf("Error() = %q, want %q", re.Error(), want)
	}
	var syn *syntax.Error
	if !errors.As(err, &syn) {
		t.Errorf("the regexp error is not reachable through %v", err)
	}
}
