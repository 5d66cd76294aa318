package shard

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/xds-relay/xds-relay/shard/ruleerr"
)

// RuleError is the error of NewClassifier: the rule at fault (its index)
// and its field ("field", "regex" or "class").
type RuleError = ruleerr.RuleError

// DefaultClass is the class of a node no rule matched and whose cluster is
// empty.
const DefaultClass = "default"

// Rule maps a node field to a class. Rules are tried in order; the first that
// yields a non-empty class wins. With no rule matching, the class is the
// node's cluster (or DefaultClass when that is empty).
type Rule struct {
	// Field is one of id, cluster, locality.region, locality.zone,
	// locality.sub_zone, user_agent_name, or metadata.KEY[.KEY...] for a
	// (nested) node metadata value.
	Field string
	// Regex, if set, must match the field's value for the rule to apply.
	Regex string
	// Class is the class template; $1, ${name} expand the regex's groups.
	// Empty means the whole match (or the whole value without Regex).
	Class string
}

// Classifier computes node classes from compiled rules. It is immutable and
// safe for concurrent use.
type Classifier struct{ rules []compiledRule }

type compiledRule struct {
	field   string
	extract func(*corev3.Node) string
	re      *regexp.Regexp
	class   string
}

// NewClassifier compiles rules. The error is a *RuleError naming the rule
// and its field at fault.
func NewClassifier(rules []Rule) (*Classifier, error) {
	c := &Classifier{}
	for i, r := range rules {
		extract, err := fieldExtractor(r.Field)
		if err != nil {
			return nil, ruleerr.New(i, "field", err)
		}
		cr := compiledRule{field: r.Field, extract: extract, class: r.Class}
		if r.Regex != "" {
			if cr.re, err = regexp.Compile(r.Regex); err != nil {
				return nil, ruleerr.New(i, "regex", err)
			}
		} else if strings.Contains(r.Class, "$") {
			return nil, ruleerr.New(i, "class", fmt.Errorf("%q refers to regex groups but the rule has no regex", r.Class))
		}
		c.rules = append(c.rules, cr)
	}
	return c, nil
}

// Classify returns the node's class.
func (c *Classifier) Classify(node *corev3.Node) string {
	for _, r := range c.rules {
		v := r.extract(node)
		if v == "" {
			continue
		}
		class := v
		if r.re != nil {
			m := r.re.FindStringSubmatchIndex(v)
			if m == nil {
				continue
			}
			if r.class == "" {
				class = v[m[0]:m[1]]
			} else {
				class = string(r.re.ExpandString(nil, r.class, v, m))
			}
		} else if r.class != "" {
			class = r.class
		}
		if class != "" {
			return class
		}
	}
	if cl := node.GetCluster(); cl != "" {
		return cl
	}
	return DefaultClass
}

func fieldExtractor(field string) (func(*corev3.Node) string, error) {
	switch field {
	case "id":
		return (*corev3.Node).GetId, nil
	case "cluster":
		return (*corev3.Node).GetCluster, nil
	case "locality.region":
		return func(n *corev3.Node) string { return n.GetLocality().GetRegion() }, nil
	case "locality.zone":
		return func(n *corev3.Node) string { return n.GetLocality().GetZone() }, nil
	case "locality.sub_zone":
		return func(n *corev3.Node) string { return n.GetLocality().GetSubZone() }, nil
	case "user_agent_name":
		return (*corev3.Node).GetUserAgentName, nil
	}
	if path, ok := strings.CutPrefix(field, "metadata."); ok && path != "" {
		keys := strings.Split(path, ".")
		return func(n *corev3.Node) string { return metadataValue(n.GetMetadata(), keys) }, nil
	}
	return nil, fmt.Errorf("unknown node field %q (want id, cluster, locality.region, locality.zone, locality.sub_zone, user_agent_name or metadata.KEY)", field)
}

func metadataValue(s *structpb.Struct, keys []string) string {
	var v *structpb.Value
	for _, k := range keys {
		if s == nil {
			return ""
		}
		v = s.GetFields()[k]
		s = v.GetStructValue()
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(k.NumberValue, 'f', -1, 64)
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(k.BoolValue)
	}
	return ""
}
