package app

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// keyLineMap maps dotted key paths ("upstream.backoff.max",
// "node_classes.rules[1].regex") to the line of the key in the file, and
// lines back to the keys on them, in file order: one per line in block
// style, several in flow style (`upstream: {address: x, protocol: sotw}`).
type keyLineMap struct {
	byKey  map[string]int
	byLine map[int][]keyAt
	values map[string]*yaml.Node // the value of each key
}

// keyAt is a key path and the node of its value.
type keyAt struct {
	path  string
	value *yaml.Node
}

func (m keyLineMap) line(key string) int { return m.byKey[key] }

// nearestLine is the line of key or, when the file does not have it (a
// required key left out), of its closest enclosing key: the rule or section
// it is missing from. 0 when none of them is in the file.
func (m keyLineMap) nearestLine(key string) int {
	for key != "" {
		if l, ok := m.byKey[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

func keyLines(root *yaml.Node) keyLineMap {
	m := keyLineMap{byKey: map[string]int{}, byLine: map[int][]keyAt{}, values: map[string]*yaml.Node{}}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				m.byKey[p], m.values[p] = k.Line, v
				m.byLine[k.Line] = append(m.byLine[k.Line], keyAt{p, v})
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				m.byKey[p], m.values[p] = c.Line, c
				m.byLine[c.Line] = append(m.byLine[c.Line], keyAt{p, c})
				walk(c, p)
			}
		}
	}
	walk(root, "")
	return m
}

var lineRE = regexp.MustCompile(`line (\d+): (.*)`)

// decodeError turns yaml.v3's decode errors ("line 4: field foo not found in
// type app.Config") into a ConfigError naming the key path.
func decodeError(file string, err error, lines keyLineMap) ConfigErrors {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return ConfigErrors{{File: file, Line: yamlErrLine(err), Msg: strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	var out ConfigErrors
	for _, e := range te.Errors {
		m := lineRE.FindStringSubmatch(e)
		if m == nil {
			out = append(out, &ConfigError{File: file, Msg: e})
			continue
		}
		line, _ := strconv.Atoi(m[1])
		msg := m[2]
		key := lines.keyAtError(line, msg)
		if unknownFieldRE.MatchString(msg) {
			msg = "unknown key"
		} else if v := wrongTypeRE.FindStringSubmatch(msg); v != nil {
			msg = "want " + describeType(v[2]) + ", got " + v[1]
		}
		out = append(out, &ConfigError{File: file, Line: line, Key: key, Msg: msg})
	}
	return out
}

// wrongTypeRE is yaml.v3's wrong value error, "cannot unmarshal !!int `30`
// into time.Duration": the value and the Go type it did not fit.
var wrongTypeRE = regexp.MustCompile("^cannot unmarshal !!\\w+ `(.*)` into (\\S+)")

// describeType says what a configuration value of Go type t looks like.
func describeType(t string) string {
	switch {
	case t == "time.Duration":
		return "a duration such as 30s"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "app."):
		return "a mapping of keys"
	}
	return t
}

var (
	// unknownFieldRE is yaml.v3's unknown key error: "field NAME not found
	// in type app.TYPE".
	unknownFieldRE = regexp.MustCompile(`^field (\S+) not found in type (\S+)`)
	// badValueRE is its wrong value error: "cannot unmarshal !!str `lots`
	// into int"; values over 10 bytes are cut to 7 and "...".
	badValueRE = regexp.MustCompile("^cannot unmarshal !!\\w+ `(.*)` into")
)

// keyAtError is the key a yaml.v3 error at line is about. yaml.v3 gives the
// line only, and a flow-style line holds several keys: an unknown key is the
// one of that name that the type does not have, a bad value the key holding
// that value. Otherwise it is the line's last key, the deepest in block
// style.
func (m keyLineMap) keyAtError(line int, msg string) string {
	keys := m.byLine[line]
	if len(keys) == 0 {
		return ""
	}
	if f := unknownFieldRE.FindStringSubmatch(msg); f != nil {
		for _, k := range keys {
			if lastSegment(k.path) == f[1] && !knownKey(k.path) {
				return k.path
			}
		}
	}
	if v := badValueRE.FindStringSubmatch(msg); v != nil {
		val, cut := strings.CutSuffix(v[1], "...")
		for _, k := range keys {
			if k.value.Kind != yaml.ScalarNode {
				continue
			}
			if k.value.Value == val || (cut && strings.HasPrefix(k.value.Value, val)) {
				return k.path
			}
		}
	}
	return keys[len(keys)-1].path
}

// lastSegment is a key path's last key: "protocol" of "upstream.protocol".
func lastSegment(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// knownKey reports whether a key path ("node_classes.rules[0].regex") names a
// field of Config, following its yaml tags.
func knownKey(path string) bool {
	t := reflect.TypeOf(Config{})
	for _, seg := range strings.Split(path, ".") {
		name, _, _ := strings.Cut(seg, "[")
		if t.Kind() != reflect.Struct {
			return false
		}
		found := false
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == name {
				t, found = f.Type, true
				break
			}
		}
		if !found {
			return false
		}
		for n := strings.Count(seg, "["); n > 0 && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array); n-- {
			t = t.Elem()
		}
	}
	return true
}

func yamlErrLine(err error) int {
	if m := lineRE.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}
