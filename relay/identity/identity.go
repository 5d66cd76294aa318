package identity

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/shard/ruleerr"
)

// RuleError is the error of NewBinder: the rule at fault (its index) and its
// field ("san", "node_id" or "class").
type RuleError = ruleerr.RuleError

// Rule lets a client whose certificate has a SAN (URI SAN such as a SPIFFE
// ID, or DNS SAN) matching SAN claim node ids matching NodeID and, if Class
// is set, node classes matching Class.
//
// All three are regular expressions matched against the whole value (they
// are anchored). NodeID and Class are templates first: $1, ${1}, $name and
// ${name} expand to SAN's capture groups from the matching identity, as
// literal text; $$ is a literal $. Write ${1}x, not $1x, when a group is
// followed by a letter, digit or underscore.
//
// URI and DNS SANs are matched alike: a SAN pattern such as `.*\.example\.com`
// also matches the URI spiffe://x.example.com; spell DNS patterns without
// `.*` (e.g. `[a-z0-9-]+\.example\.com`) to keep them to DNS names.
type Rule struct {
	SAN    string
	NodeID string
	Class  string
}

// Binder decides which nodes a client identity may claim. It is immutable and
// safe for concurrent use.
type Binder struct{ rules []compiledRule }

type compiledRule struct {
	san    *regexp.Regexp
	nodeID template
	class  template // raw "" means any class
}

// template is a NodeID or Class pattern; static is its compiled form when it
// refers to no SAN group.
type template struct {
	raw    string
	static *regexp.Regexp
}

// NewBinder compiles rules. An error is a *RuleError naming the rule and
// field (rules[i].san, rules[i].node_id, rules[i].class). With no rules the Binder
// allows every client (binding is off).
func NewBinder(rules []Rule) (*Binder, error) {
	b := &Binder{}
	for i, r := range rules {
		if r.SAN == "" {
			return nil, ruleerr.New(i, "san", errors.New("required"))
		}
		san, err := regexp.Compile(anchor(r.SAN))
		if err != nil {
			return nil, ruleerr.New(i, "san", err)
		}
		if r.NodeID == "" {
			return nil, ruleerr.New(i, "node_id", errors.New(`required (".*" allows any node id)`))
		}
		cr := compiledRule{san: san}
		if cr.nodeID, err = compileTemplate(r.NodeID, san); err != nil {
			return nil, ruleerr.New(i, "node_id", err)
		}
		if r.Class != "" {
			if cr.class, err = compileTemplate(r.Class, san); err != nil {
				return nil, ruleerr.New(i, "class", err)
			}
		}
		b.rules = append(b.rules, cr)
	}
	return b, nil
}

// compileTemplate checks that tmpl refers only to groups san has and that it
// is a valid regular expression whatever the groups hold.
func compileTemplate(tmpl string, san *regexp.Regexp) (template, error) {
	var bad error
	refs := 0
	probe := expand(tmpl, func(name string, num int) string {
		refs++
		if bad == nil && groupIndex(san, name, num) < 0 {
			msg := fmt.Sprintf("$%s refers to a group the san pattern does not have", name)
			if d := leadingDigits(name); d != "" && d != name {
				msg += fmt.Sprintf(" (write ${%s}%s for group %s followed by %q)", d, name[len(d):], d, name[len(d):])
			}
			bad = errors.New(msg)
		}
		return quote("x")
	})
	if bad != nil {
		return template{}, bad
	}
	re, err := regexp.Compile(anchor(probe))
	if err != nil {
		return template{}, err
	}
	t := template{raw: tmpl}
	if refs == 0 {
		t.static = re
	}
	return t, nil
}

// match reports whether value matches t expanded with the groups of the SAN
// match m of id.
func (t template) match(value string, san *regexp.Regexp, id string, m []int) bool {
	if t.static != nil {
		return t.static.MatchString(value)
	}
	pattern := expand(t.raw, func(name string, num int) string {
		i := groupIndex(san, name, num)
		if i < 0 || 2*i+1 >= len(m) || m[2*i] < 0 {
			return quote("")
		}
		return quote(id[m[2*i]:m[2*i+1]])
	})
	re, err := regexp.Compile(anchor(pattern))
	if err != nil {
		// Checked at NewBinder with a placeholder; quoted values cannot
		// make a valid pattern invalid, so this is not expected.
		return false
	}
	return re.MatchString(value)
}

// Authorize allows the stream whose context is ctx to claim node for class
// when some rule's SAN matches an identity of the verified client
// certificate and the node id (and class, if the rule has one) match that
// rule's templates. Otherwise it returns PermissionDenied. It has the
// signature of relay.Options.Authorize.
func (b *Binder) Authorize(ctx context.Context, node *corev3.Node, class string) error {
	if b == nil || len(b.rules) == 0 {
		return nil
	}
	ids, err := PeerIdentities(ctx)
	if err != nil {
		return err
	}
	for _, r := range b.rules {
		for _, id := range ids {
			m := r.san.FindStringSubmatchIndex(id)
			if m == nil {
				continue
			}
			if !r.nodeID.match(node.GetId(), r.san, id, m) {
				continue
			}
			if r.class.raw != "" && !r.class.match(class, r.san, id, m) {
				continue
			}
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "node %q (class %q) may not be claimed by client identity %v", node.GetId(), class, ids)
}

// PeerIdentities returns the identities of the stream's verified client
// certificate: its URI SANs (as strings), then its DNS SANs. Without a
// verified client certificate the error is PermissionDenied.
func PeerIdentities(ctx context.Context) ([]string, error) {
	leaf, err := verifiedLeaf(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(leaf.URIs)+len(leaf.DNSNames))
	for _, u := range leaf.URIs {
		ids = append(ids, u.String())
	}
	ids = append(ids, leaf.DNSNames...)
	if len(ids) == 0 {
		return nil, status.Error(codes.PermissionDenied, "client certificate has no URI or DNS SAN")
	}
	return ids, nil
}

// VerifiedClientCert returns nil when the stream's peer (ctx holds a gRPC
// peer; relay's REST handler puts one there too) presented a client
// certificate the listener verified against its client CAs, and a
// PermissionDenied error saying what is missing otherwise.
func VerifiedClientCert(ctx context.Context) error {
	_, err := verifiedLeaf(ctx)
	return err
}

// verifiedLeaf is the leaf of the peer's first verified chain.
func verifiedLeaf(ctx context.Context) (*x509.Certificate, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.PermissionDenied, "no client certificate: no peer")
	}
	var state *credentials.TLSInfo
	switch info := p.AuthInfo.(type) {
	case credentials.TLSInfo:
		state = &info
	case *credentials.TLSInfo:
		state = info
	}
	if state == nil {
		return nil, status.Error(codes.PermissionDenied, "no client certificate: the connection is not TLS")
	}
	chains := state.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		if len(state.State.PeerCertificates) > 0 {
			return nil, status.Error(codes.PermissionDenied, "client certificate not verified (the listener needs a client CA)")
		}
		return nil, status.Error(codes.PermissionDenied, "no client certificate")
	}
	return chains[0][0], nil
}

func anchor(re string) string { return "^(?:" + re + ")$" }

// quote makes a group's value a literal atom of a pattern.
func quote(v string) string { return "(?:" + regexp.QuoteMeta(v) + ")" }

// groupIndex is the SAN group a template reference names, or -1.
func groupIndex(re *regexp.Regexp, name string, num int) int {
	if num >= 0 {
		if num <= re.NumSubexp() {
			return num
		}
		return -1
	}
	return re.SubexpIndex(name)
}

func leadingDigits(s string) string {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i]
}

// expand replaces each reference in tmpl ($name, ${name}; $$ is a literal
// $) with repl's result, as regexp.Expand parses them: name is the longest
// run of letters, digits and underscores, a number when all digits (without
// a leading zero); a $ starting no valid reference stays as is.
func expand(tmpl string, repl func(name string, num int) string) string {
	var sb strings.Builder
	for {
		i := strings.IndexByte(tmpl, '$')
		if i < 0 {
			sb.WriteString(tmpl)
			return sb.String()
		}
		sb.WriteString(tmpl[:i])
		tmpl = tmpl[i+1:]
		if strings.HasPrefix(tmpl, "$") {
			sb.WriteByte('$')
			tmpl = tmpl[1:]
			continue
		}
		name, num, rest, ok := extract(tmpl)
		if !ok {
			sb.WriteByte('$')
			continue
		}
		sb.WriteString(repl(name, num))
		tmpl = rest
	}
}

// extract parses a reference after its $ (the rules of regexp.Expand).
func extract(str string) (name string, num int, rest string, ok bool) {
	if str == "" {
		return "", 0, "", false
	}
	brace := false
	if str[0] == '{' {
		brace = true
		str = str[1:]
	}
	i := 0
	for i < len(str) {
		r, size := utf8.DecodeRuneInString(str[i:])
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' {
			break
		}
		i += size
	}
	if i == 0 {
		return "", 0, "", false
	}
	name = str[:i]
	if brace {
		if i >= len(str) || str[i] != '}' {
			return "", 0, "", false
		}
		i++
	}
	num = 0
	for j := 0; j < len(name); j++ {
		if name[j] < '0' || name[j] > '9' || num >= 1e8 {
			num = -1
			break
		}
		num = num*10 + int(name[j]) - '0'
	}
	if name[0] == '0' && len(name) > 1 {
		num = -1
	}
	return name, num, str[i:], true
}
