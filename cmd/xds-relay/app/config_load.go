package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// LoadConfig reads and validates a configuration file over the defaults.
func LoadConfig(path string) (Config, error) {
	cfg, _, err := LoadConfigWithWarnings(path)
	return cfg, err
}

// LoadConfigWithWarnings is LoadConfig, also returning what the file should
// change though it is valid (see ParseConfigWithWarnings).
func LoadConfigWithWarnings(path string) (Config, ConfigErrors, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, nil, err
	}
	return ParseConfigWithWarnings(path, data)
}

// ParseConfig decodes data strictly: an unknown key, a value of the wrong
// type or an invalid value is an error naming the key and its line. Keys
// left out or at their zero value take their defaults.
func ParseConfig(file string, data []byte) (Config, error) {
	cfg, _, err := ParseConfigWithWarnings(file, data)
	return cfg, err
}

// ParseConfigWithWarnings is ParseConfig, also returning warnings, each
// naming a key and its line: a deprecated key (upstream.addresses), and a 0
// written for a key that 0 used to switch off and that now takes its
// default (write -1 to switch it off).
func ParseConfigWithWarnings(file string, data []byte) (Config, ConfigErrors, error) {
	var cfg Config
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		cfg.applyDefaults()
		return cfg, nil, &ConfigError{File: file, Line: yamlErrLine(err), Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	lines := keyLines(&root)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// yaml.v3 decodes what it can past a wrong key or value, so the values
	// are checked too and every problem is reported at once.
	var errs ConfigErrors
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		errs = decodeError(file, err, lines)
	}
	cfg.applyDefaults()
	reported := map[string]bool{}
	for _, ce := range errs {
		reported[ce.Key] = true
	}
	for _, ce := range asConfigErrors(cfg.validate()) {
		ce.Key = lines.asWritten(ce.Key)
		if reported[ce.Key] {
			continue // the value was not decoded: the decode error says why
		}
		ce.File, ce.Line = file, lines.nearestLine(ce.Key)
		errs = append(errs, ce)
	}
	errs.sortByLine()
	return cfg, fileWarnings(file, lines), errs.orNil()
}

// asWritten is key as the file spells it: under a deprecated name the file
// uses instead of the current one (upstream.addresses[1] for
// upstream.fallbacks[1]).
func (m keyLineMap) asWritten(key string) string {
	for old, now := range deprecatedKeys {
		if rest, ok := strings.CutPrefix(key, now); ok && (rest == "" || rest[0] == '[' || rest[0] == '.') {
			if _, usesNow := m.byKey[now]; !usesNow {
				if _, usesOld := m.byKey[old]; usesOld {
					return old + rest
				}
			}
		}
	}
	return key
}

// fileWarnings are the deprecated keys the file uses, and the keys it sets
// to 0 that 0 used to switch off, in file order.
func fileWarnings(file string, lines keyLineMap) ConfigErrors {
	var ws ConfigErrors
	for old, now := range deprecatedKeys {
		if l, ok := lines.byKey[old]; ok {
			ws = append(ws, &ConfigError{File: file, Line: l, Key: old, Msg: "deprecated: write " + now})
		}
	}
	for _, s := range settings {
		v := lines.values[s.key]
		if s.off == "" || v == nil {
			continue
		}
		zero := reflect.New(reflect.TypeOf(s.def))
		if v.Decode(zero.Interface()) != nil || !zero.Elem().IsZero() {
			continue
		}
		msg := fmt.Sprintf("0 takes the default (%v); to %s, as 0 used to, write -1", s.def, s.off)
		if s.doc != "" { // a default computed at run time; 0 never switched the key off
			msg = fmt.Sprintf("0 takes the default (%s); to %s, write -1", s.doc, s.off)
		}
		ws = append(ws, &ConfigError{File: file, Line: lines.line(s.key), Key: s.key, Msg: msg})
	}
	slices.SortStableFunc(ws, func(a, b *ConfigError) int { return a.Line - b.Line })
	return ws
}
