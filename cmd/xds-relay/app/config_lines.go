package app

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// keyLineMap maps dotted key paths ("upstream.backoff.max",
// "node_classes.rules[1].regex") to the line of the key in the file, and
// lines back to the deepest key that starts there.
type keyLineMap struct {
	byKey  map[string]int
	byLine map[int]string
}

func (m keyLineMap) line(key string) int { return m.byKey[key] }

func keyLines(root *yaml.Node) keyLineMap {
	m := keyLineMap{byKey: map[string]int{}, byLine: map[int]string{}}
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
				m.byKey[p] = k.Line
				m.byLine[k.Line] = p
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				m.byKey[p] = c.Line
				if _, ok := m.byLine[c.Line]; !ok {
					m.byLine[c.Line] = p
				}
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
func decodeError(file string, err error, lines keyLineMap) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return &ConfigError{File: file, Line: yamlErrLine(err), Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	m := lineRE.FindStringSubmatch(te.Errors[0])
	if m == nil {
		return &ConfigError{File: file, Msg: te.Errors[0]}
	}
	line, _ := strconv.Atoi(m[1])
	msg := m[2]
	if f := regexp.MustCompile(`^field (\S+) not found in type`).FindStringSubmatch(msg); f != nil {
		msg = "unknown key"
	}
	return &ConfigError{File: file, Line: line, Key: lines.byLine[line], Msg: msg}
}

func yamlErrLine(err error) int {
	if m := lineRE.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}
