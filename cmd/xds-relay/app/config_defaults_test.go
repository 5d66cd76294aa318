package app

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// yamlAt is a file setting the dotted key to value, one key a line, and the
// line of the key itself.
func yamlAt(key, value string) (string, int) {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts[:len(parts)-1] {
		b.WriteString(strings.Repeat("  ", i) + p + ":\n")
	}
	b.WriteString(strings.Repeat("  ", len(parts)-1) + parts[len(parts)-1] + ": " + value + "\n")
	return b.String(), len(parts)
}

// leafKeys are the dotted keys of t's fields, following yaml tags; a list
// or a scalar is a leaf.
func leafKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		if f.Type.Kind() == reflect.Struct {
			keys = append(keys, leafKeys(f.Type, key)...)
		} else {
			keys = append(keys, key)
		}
	}
	return keys
}

// settings lists every key of Config once, each default of its field's type,
// and DefaultConfig holds them.
func TestSettingsCoverConfig(t *testing.T) {
	inTable := map[string]setting{}
	for _, s := range settings {
		if _, dup := inTable[s.key]; dup {
			t.Errorf("%s: listed twice", s.key)
		}
		inTable[s.key] = s
	}
	def := reflect.ValueOf(DefaultConfig())
	for _, key := range leafKeys(reflect.TypeOf(Config{}), "") {
		if _, old := deprecatedKeys[key]; old {
			continue
		}
		s, ok := inTable[key]
		if !ok {
			t.Errorf("%s: a key of Config without a setting", key)
			continue
		}
		delete(inTable, key)
		f := fieldOf(def, key)
		if s.def == nil {
			if f.Kind() != reflect.Slice {
				t.Errorf("%s: no default, but not a list (%v)", key, f.Type())
			}
			continue
		}
		if reflect.TypeOf(s.def) != f.Type() {
			t.Errorf("%s: default %v is a %T, the field a %v", key, s.def, s.def, f.Type())
		} else if f.Interface() != s.def {
			t.Errorf("DefaultConfig's %s = %v, want %v", key, f.Interface(), s.def)
		}
	}
	for key := range inTable {
		t.Errorf("%s: a setting for no key of Config", key)
	}
	if d := DefaultConfig(); d.Validate() != nil {
		err := d.Validate()
		t.Errorf("the defaults are invalid: %v", err)
	}
}

// One rule for every number and duration: 0 in the file takes the default.
// A key that can be switched off takes -1 for it, and a 0 there is warned
// at its line (0 used to switch it off); for any other key a negative
// value is an error at its line.
func TestZeroMeansDefaultNegativeMeansOff(t *testing.T) {
	for _, s := range settings {
		var zero, negative string
		switch s.def.(type) {
		case time.Duration:
			zero, negative = "0s", "-1s"
		case int, float64:
			zero, negative = "0", "-1"
		default:
			continue
		}
		t.Run(s.key, func(t *testing.T) {
			data, line := yamlAt(s.key, zero)
			cfg, warnings, err := ParseConfigWithWarnings("relay.yaml", []byte(data))
			if err != nil {
				t.Fatalf("%s: %v", zero, err)
			}
			if got := fieldOf(reflect.ValueOf(cfg), s.key).Interface(); got != s.def {
				t.Errorf("%s: got %v, want the default %v", zero, got, s.def)
			}
			switch {
			case s.off == "" && len(warnings) > 0:
				t.Errorf("%s: warned %v", zero, warnings)
			case s.off != "" && (len(warnings) != 1 || warnings[0].Line != line || warnings[0].Key != s.key ||
				!strings.Contains(warnings[0].Msg, "write -1")):
				t.Errorf("%s: warnings %v, want one at line %d naming %s and -1", zero, warnings, line, s.key)
			}

			data, line = yamlAt(s.key, negative)
			cfg, err = ParseConfig("relay.yaml", []byte(data))
			if s.off != "" {
				if err != nil {
					t.Fatalf("%s (off): %v", negative, err)
				}
				if f := fieldOf(reflect.ValueOf(cfg), s.key); !(f.CanInt() && f.Int() < 0 || f.CanFloat() && f.Float() < 0) {
					t.Errorf("%s: got %v, want it kept negative (off)", negative, f.Interface())
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != s.key || ce.Line != line {
				t.Errorf("%s: err = %v, want one naming %s at line %d", negative, err, s.key, line)
			}
		})
	}
}

// upstream.addresses, the old name of upstream.fallbacks, still works, with
// a warning at its line.
func TestDeprecatedAddressesKey(t *testing.T) {
	cfg, warnings, err := ParseConfigWithWarnings("relay.yaml", []byte("upstream:\n  address: cp:1\n  addresses: [cp2:1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Upstream.Fallbacks) != 1 || cfg.Upstream.Fallbacks[0] != "cp2:1" || cfg.Upstream.DeprecatedAddresses != nil {
		t.Errorf("upstream = %+v, want fallbacks [cp2:1]", cfg.Upstream)
	}
	if len(warnings) != 1 || warnings[0].Line != 3 || warnings[0].Key != "upstream.addresses" || !strings.Contains(warnings[0].Msg, "upstream.fallbacks") {
		t.Errorf("warnings = %v, want upstream.addresses at line 3 naming upstream.fallbacks", warnings)
	}
	_, warnings, err = ParseConfigWithWarnings("relay.yaml", []byte("upstream:\n  address: cp:1\n  fallbacks: [cp2:1]\n"))
	if err != nil || len(warnings) != 0 {
		t.Errorf("fallbacks: err %v, warnings %v; want neither", err, warnings)
	}
}

// docDefaultRow is a row of docs/configuration.md's key table: its keys
// (`a.b`, `.c` relative to the first) and its default cell.
var docDefaultRow = regexp.MustCompile("^\\| (`[^|]+) \\| ([^|]+) \\|")

// The defaults docs/configuration.md states are the code's.
func TestDocsDefaultsMatchCode(t *testing.T) {
	data, err := os.ReadFile("../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]setting{}
	for _, s := range settings {
		byKey[s.key] = s
	}
	documented := map[string]bool{}
	backquoted := regexp.MustCompile("`([^`]*)`")
	for _, line := range strings.Split(string(data), "\n") {
		m := docDefaultRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var keys []string
		for _, k := range backquoted.FindAllStringSubmatch(m[1], -1) {
			key := k[1]
			if strings.HasPrefix(key, ".") && len(keys) > 0 {
				key = keys[0][:strings.LastIndexByte(keys[0], '.')] + key
			}
			keys = append(keys, key)
		}
		cell := strings.TrimSpace(m[2])
		values := backquoted.FindAllStringSubmatch(cell, -1)
		for i, key := range keys {
			documented[key] = true
			s, ok := byKey[key]
			if !ok {
				if _, old := deprecatedKeys[key]; !old {
					t.Errorf("docs: %s is not a key of the configuration", key)
				}
				continue
			}
			switch {
			case s.doc != "":
				if !strings.HasPrefix(cell, s.doc) {
					t.Errorf("docs: %s's default is %q, want it to start %q", key, cell, s.doc)
				}
			case s.def == nil || s.def == "":
				if !strings.HasPrefix(cell, "empty") {
					t.Errorf("docs: %s's default is %q, want empty", key, cell)
				}
			default:
				v := ""
				if len(values) == len(keys) {
					v = values[i][1]
				} else if len(values) == 1 {
					v = values[0][1]
				}
				if !docValueIs(v, s.def) {
					t.Errorf("docs: %s's default is %q, the code's %v", key, cell, s.def)
				}
			}
		}
	}
	for _, s := range settings {
		if !documented[s.key] {
			t.Errorf("docs: %s (default %v) is not documented", s.key, s.def)
		}
	}
}

// docValueIs reports whether v, as written in the docs, is def.
func docValueIs(v string, def any) bool {
	switch def := def.(type) {
	case time.Duration:
		d, err := time.ParseDuration(v)
		return err == nil && d == def
	case int:
		n, err := strconv.Atoi(v)
		return err == nil && n == def
	case float64:
		x, err := strconv.ParseFloat(v, 64)
		return err == nil && x == def
	case bool:
		b, err := strconv.ParseBool(v)
		return err == nil && b == def
	case string:
		return v == def
	}
	return false
}
