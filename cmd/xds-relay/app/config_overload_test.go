package app

import (
	"errors"
	"strings"
	"testing"
)

// The memory ceiling's marks are parts of the budget, the soft one below
// the refuse one: a file that breaks it is refused at the key and line.
func TestOverloadMarksChecked(t *testing.T) {
	for _, tc := range []struct{ file, key string }{
		{"overload:\n  shed_ratio: 0.9\n  refuse_ratio: 0.8\n", "overload.refuse_ratio"},
		{"overload:\n  refuse_ratio: 1.5\n", "overload.refuse_ratio"},
		{"overload:\n  shed_ratio: 1\n  refuse_ratio: 1\n", "overload.shed_ratio"},
		{"overload:\n  memory_budget_bytes: 512\n", "overload.memory_budget_bytes"},
	} {
		_, err := ParseConfig("relay.yaml", []byte(tc.file))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != tc.key || ce.Line == 0 {
			t.Errorf("%q: err = %v, want one naming %s at its line", tc.file, err, tc.key)
		}
	}
	_, warnings, err := ParseConfigWithWarnings("relay.yaml", []byte("overload:\n  memory_budget_bytes: 0\n"))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0].Msg, "GOMEMLIMIT") || strings.Contains(warnings[0].Msg, "used to") {
		t.Errorf("memory_budget_bytes 0: err %v, warnings %v; want one saying the default is GOMEMLIMIT...", err, warnings)
	}
}
