package shard

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// fuzzFields are the node fields a rule may name; fuzzed selectors pick
// one of them, a metadata path, or the fuzzed text itself (mostly garbage).
var fuzzFields = []string{"id", "cluster", "locality.region", "locality.zone", "locality.sub_zone", "user_agent_name"}

func fuzzField(sel uint8, text string) string {
	switch n := int(sel) % (len(fuzzFields) + 3); {
	case n < len(fuzzFields):
		return fuzzFields[n]
	case n == len(fuzzFields):
		return "metadata." + text
	case n == len(fuzzFields)+1:
		return "metadata"
	default:
		return text
	}
}

// FuzzClassifier compiles up to three fuzzed rules (a field from the valid
// set or garbage, a regex, a class template) and classifies a fuzzed node:
//
//   - NewClassifier fails exactly when a rule is invalid (unknown field,
//     regex that does not compile, "$" in the class of a rule without
//     regex), with a *RuleError naming the first bad rule and its field
//     (field, regex or class), which the config loader maps to a key path;
//   - otherwise Classify returns a non-empty class, the same twice and for a
//     copy of the node, and the one the documented rules give (first rule
//     with a non-empty result; the node's cluster; "default").
func FuzzClassifier(f *testing.F) {
	f.Add(uint8(3), uint8(0), "", "", "", uint8(0), "", "", "", "n1", "c1", "us-east", "z1", "", "envoy", "role", "gw-east", uint8(0))
	f.Add(uint8(1), uint8(6), "role", `^gw-(.*)$`, "gw-$1", uint8(0), "", "", "", "n1", "c1", "", "", "", "", "role", "gw-east", uint8(0))
	f.Add(uint8(2), uint8(0), "", `^(?P<tenant>[a-z]+)-`, "${tenant}", uint8(2), "", "", "", "acme-7", "", "eu", "", "", "", "", "", uint8(0))
	f.Add(uint8(2), uint8(6), "a.b", `(\d+)`, "", uint8(1), "", "x", "", "n", "c", "", "", "", "", "a", "7", uint8(1))
	f.Add(uint8(1), uint8(6), "flag", "", "fixed", uint8(0), "", "", "", "n", "", "", "", "", "", "flag", "", uint8(2))
	f.Add(uint8(1), uint8(8), "idd", "", "", uint8(0), "", "", "", "n", "", "", "", "", "", "", "", uint8(0))
	f.Add(uint8(2), uint8(0), "", "(", "", uint8(0), "", "", "", "n", "", "", "", "", "", "", "", uint8(0))
	f.Add(uint8(2), uint8(0), "", "", "$1", uint8(0), "", "", "", "n", "", "", "", "", "", "", "", uint8(0))
	f.Add(uint8(2), uint8(7), "", "", "", uint8(8), "", "", "", "n", "", "", "", "", "", "", "", uint8(0))
	f.Add(uint8(3), uint8(0), "", "^$", "x", uint8(0), "", "(a)|(b)", "$2", "", "", "", "", "", "", "", "", uint8(0))
	f.Add(uint8(1), uint8(6), "", "", "", uint8(0), "", "", "", "n", "c", "", "", "", "", "", "", uint8(0))
	f.Fuzz(func(t *testing.T, nRules, sel1 uint8, text1, regex1, class1 string, sel2 uint8, text2, regex2, class2,
		id, cluster, region, zone, subZone, userAgent, metaKey, metaValue string, metaKind uint8) {
		specs := []Rule{
			{Field: fuzzField(sel1, text1), Regex: regex1, Class: class1},
			{Field: fuzzField(sel2, text2), Regex: regex2, Class: class2},
			{Field: fuzzField(sel1+sel2, text2), Regex: regex1, Class: class2},
		}
		rules := specs[:int(nRules)%(len(specs)+1)]
		node := &corev3.Node{Id: id, Cluster: cluster, UserAgentName: userAgent,
			Locality: &corev3.Locality{Region: region, Zone: zone, SubZone: subZone}}
		if metaKey != "" {
			node.Metadata = fuzzMetadata(metaKey, metaValue, metaKind)
		}

		c, err := NewClassifier(rules)
		bad, key := firstBadRule(rules)
		if err != nil {
			if bad < 0 {
				t.Fatalf("valid rules %+v rejected: %v", rules, err)
			}
			var re *RuleError
			if !errors.As(err, &re) || re.Index != bad || re.Field != key {
				t.Fatalf("error %q (%+v) for rules %+v, want a RuleError for rules[%d].%s", err, re, rules, bad, key)
			}
			if prefix := fmt.Sprintf("rules[%d].%s: ", bad, key); !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("error %q for rules %+v, want it to start with %q", err, rules, prefix)
			}
			return
		}
		if bad >= 0 {
			t.Fatalf("rules %+v accepted; rules[%d].%s is invalid", rules, bad, key)
		}
		got := c.Classify(node)
		if got == "" {
			t.Fatalf("empty class for node %v with rules %+v", node, rules)
		}
		if again := c.Classify(proto.Clone(node).(*corev3.Node)); again != got {
			t.Fatalf("class %q, then %q for the same node", got, again)
		}
		if want := modelClassify(rules, node); got != want {
			t.Fatalf("class %q for node %v with rules %+v, want %q", got, node, rules, want)
		}
	})
}

// fuzzMetadata is metadata holding value at key: a dotted key nests
// structs; kind picks a string, number or bool value.
func fuzzMetadata(key, value string, kind uint8) *structpb.Struct {
	var leaf *structpb.Value
	switch kind % 3 {
	case 0:
		leaf = structpb.NewStringValue(value)
	case 1:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			f = float64(len(value))
		}
		leaf = structpb.NewNumberValue(f)
	default:
		leaf = structpb.NewBoolValue(len(value)%2 == 0)
	}
	parts := strings.Split(key, ".")
	for i := len(parts) - 1; i > 0; i-- {
		leaf = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{parts[i]: leaf}})
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{parts[0]: leaf}}
}

// firstBadRule returns the index and key of the first invalid rule, -1 if
// all are valid.
func firstBadRule(rules []Rule) (int, string) {
	for i, r := range rules {
		path, isMeta := strings.CutPrefix(r.Field, "metadata.")
		if !(isMeta && path != "") && !slices.Contains(fuzzFields, r.Field) {
			return i, "field"
		}
		if r.Regex != "" {
			if _, err := regexp.Compile(r.Regex); err != nil {
				return i, "regex"
			}
		} else if strings.Contains(r.Class, "$") {
			return i, "class"
		}
	}
	return -1, ""
}

// modelClassify is the documented classification, computed independently.
func modelClassify(rules []Rule, node *corev3.Node) string {
	for _, r := range rules {
		var v string
		switch r.Field {
		case "id":
			v = node.GetId()
		case "cluster":
			v = node.GetCluster()
		case "locality.region":
			v = node.GetLocality().GetRegion()
		case "locality.zone":
			v = node.GetLocality().GetZone()
		case "locality.sub_zone":
			v = node.GetLocality().GetSubZone()
		case "user_agent_name":
			v = node.GetUserAgentName()
		default:
			v = modelMetadata(node.GetMetadata(), strings.TrimPrefix(r.Field, "metadata."))
		}
		if v == "" {
			continue
		}
		class := v
		if r.Regex != "" {
			re := regexp.MustCompile(r.Regex)
			m := re.FindStringSubmatchIndex(v)
			if m == nil {
				continue
			}
			if r.Class == "" {
				class = v[m[0]:m[1]]
			} else {
				class = string(re.ExpandString(nil, r.Class, v, m))
			}
		} else if r.Class != "" {
			class = r.Class
		}
		if class != "" {
			return class
		}
	}
	if node.GetCluster() != "" {
		return node.GetCluster()
	}
	return DefaultClass
}

func modelMetadata(s *structpb.Struct, path string) string {
	keys := strings.Split(path, ".")
	var v *structpb.Value
	for i, k := range keys {
		if s == nil {
			return ""
		}
		v = s.GetFields()[k]
		if i < len(keys)-1 {
			s = v.GetStructValue()
		}
	}
	switch x := v.AsInterface().(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}
