package filesource

// This file parses one resource file (YAML or proto3 JSON) into its
// resources, with the line of each and of whatever is wrong in it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strings"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"
)

// errEmpty is the error of a file without content. A file being rewritten
// can be seen empty for a moment; keeping the last good state then is safer
// than serving nothing.
var errEmpty = errors.New("file is empty: it must hold a DiscoveryResponse (`resources: []` for none)")

// parseFile decodes a file's DiscoveryResponse and returns its resources,
// for YAML the line of each, and the canonical type URL of its type_url
// ("" when it has none).
func parseFile(path string, data []byte) ([]*anypb.Any, []int, string, error) {
	var (
		resp  *discoveryv3.DiscoveryResponse
		lines []int
		err   error
	)
	if strings.ToLower(filepath.Ext(path)) == ".json" {
		resp, err = parseJSON(data)
	} else {
		resp, lines, err = parseYAML(data)
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if len(lines) != len(resp.Resources) {
		lines = nil
	}
	declared := ""
	if want := typeName(resp.TypeUrl); want != "" {
		declared = typePrefix + want
		for i, a := range resp.Resources {
			if typeName(a.TypeUrl) != want {
				return nil, nil, "", fmt.Errorf("%s: %s: type %q does not match the file's type_url %q", path, where(i, lines), a.TypeUrl, resp.TypeUrl)
			}
		}
	}
	return resp.Resources, lines, declared, nil
}

func parseJSON(data []byte) (*discoveryv3.DiscoveryResponse, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errEmpty
	}
	resp := &discoveryv3.DiscoveryResponse{}
	if err := protojson.Unmarshal(data, resp); err != nil {
		return nil, protoError(err, true)
	}
	return resp, nil
}

func parseYAML(data []byte) (*discoveryv3.DiscoveryResponse, []int, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err == io.EOF {
		return nil, nil, errEmpty
	} else if err != nil {
		return nil, nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err != io.EOF {
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("line %d: a second YAML document: a file holds one DiscoveryResponse", extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("line %d: the top level must be a mapping (a DiscoveryResponse)", root.Line)
	}
	var items []*yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "resources" && root.Content[i+1].Kind == yaml.SequenceNode {
			items = root.Content[i+1].Content
		}
	}
	js, err := yamlToJSON(root)
	if err != nil {
		return nil, nil, err
	}
	resp := &discoveryv3.DiscoveryResponse{}
	if err := protojson.Unmarshal(js, resp); err != nil {
		// The JSON's positions mean nothing in the YAML file: find the
		// resource at fault and give its line instead.
		for i, item := range items {
			js, jerr := yamlToJSON(item)
			if jerr != nil {
				return nil, nil, fmt.Errorf("resources[%d] (line %d): %w", i, item.Line, jerr)
			}
			if aerr := protojson.Unmarshal(js, &anypb.Any{}); aerr != nil {
				perr := protoError(aerr, false)
				return nil, nil, fmt.Errorf("resources[%d] (line %d): %w", i, culpritLine(item, perr.Error()), perr)
			}
		}
		return nil, nil, protoError(err, false)
	}
	lines := make([]int, len(items))
	for i, item := range items {
		lines[i] = item.Line
	}
	return resp, lines, nil
}

// quoted is a token protojson quotes in its errors: the unknown field's
// name, the invalid value.
var quoted = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// culpritLine is the line, inside a resource's YAML, of the key or value
// that protojson's error msg quotes (unknown field "lb_polcy" is on the
// line of the key lb_polcy, not of the resource's first line); the
// resource's own line when none matches.
func culpritLine(item *yaml.Node, msg string) int {
	m := quoted.FindAllStringSubmatch(msg, -1)
	if len(m) == 0 {
		return item.Line
	}
	token := m[len(m)-1][1]
	line := 0
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || line != 0 {
			return
		}
		if n.Kind == yaml.ScalarNode && n.Value == token {
			line = n.Line
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(item)
	if line == 0 {
		return item.Line
	}
	return line
}

var (
	// protoPrefix is protojson's error prefix; the library randomly uses a
	// non-breaking space after it.
	protoPrefix = regexp.MustCompile(`^proto:[ \x{00a0}]*`)
	// protoPos is the position protojson gives: "(line 3:7)".
	protoPos = regexp.MustCompile(`[ \x{00a0}]*\(line (\d+):(\d+)\)`)
)

// protoError rewrites a protojson error as "line L:C: message", or just
// "message" when the position is meaningless (JSON converted from YAML).
func protoError(err error, withPos bool) error {
	msg := protoPrefix.ReplaceAllString(err.Error(), "")
	m := protoPos.FindStringSubmatchIndex(msg)
	if m == nil {
		return errors.New(msg)
	}
	rest := strings.TrimLeft(msg[:m[0]]+msg[m[1]:], ": \u00a0")
	if withPos {
		return fmt.Errorf("line %s:%s: %s", msg[m[2]:m[3]], msg[m[4]:m[5]], rest)
	}
	return errors.New(rest)
}

// yamlToJSON converts a YAML node (anchors, aliases and merge keys resolved)
// to JSON for protojson.
func yamlToJSON(n *yaml.Node) ([]byte, error) {
	scalarsAsText(n, map[*yaml.Node]bool{})
	var v any
	if err := n.Decode(&v); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("yaml: %s", strings.Join(te.Errors, "; "))
		}
		return nil, err
	}
	v, err := jsonValue(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// scalarsAsText retags the scalars whose decoded Go value JSON would not
// carry as written: timestamps stay the text the file has (protojson parses
// Timestamp fields from it), and !!binary its base64, which protojson
// expects for bytes fields.
func scalarsAsText(n *yaml.Node, done map[*yaml.Node]bool) {
	if n == nil || done[n] {
		return
	}
	done[n] = true
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!timestamp":
			n.Tag = "!!str"
		case "!!binary":
			n.Tag = "!!str"
			n.Value = strings.Join(strings.Fields(n.Value), "")
		}
	}
	scalarsAsText(n.Alias, done)
	for _, c := range n.Content {
		scalarsAsText(c, done)
	}
}

// jsonValue makes a decoded YAML value encodable as JSON the way protojson
// reads it: mapping keys become strings and non-finite floats the strings
// protojson accepts for them.
func jsonValue(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			x[k] = e
		}
		return x, nil
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			switch k.(type) {
			case string, int, int64, uint64, bool, float64:
			default:
				return nil, fmt.Errorf("unsupported mapping key %v (%T)", k, k)
			}
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			out[fmt.Sprint(k)] = e
		}
		return out, nil
	case []any:
		for i, e := range x {
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			x[i] = e
		}
		return x, nil
	case float64:
		switch {
		case math.IsNaN(x):
			return "NaN", nil
		case math.IsInf(x, 1):
			return "Infinity", nil
		case math.IsInf(x, -1):
			return "-Infinity", nil
		}
		return x, nil
	}
	return v, nil
}
