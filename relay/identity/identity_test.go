package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// cert is a hand-made leaf with these SANs (URIs are parsed, the rest are
// DNS names); Authorize reads only the verified chain, not signatures.
func cert(t *testing.T, uris []string, dns ...string) *x509.Certificate {
	t.Helper()
	c := &x509.Certificate{DNSNames: dns}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

// verifiedPeer is a stream context whose peer presented c, verified.
func verifiedPeer(c *x509.Certificate) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}},
	}})
}

func node(id, cluster string) *corev3.Node { return &corev3.Node{Id: id, Cluster: cluster} }

func mustBinder(t *testing.T, rules ...Rule) *Binder {
	t.Helper()
	b, err := NewBinder(rules)
	if err != nil {
		t.Fatalf("NewBinder: %v", err)
	}
	return b
}

func wantAllowed(t *testing.T, b *Binder, ctx context.Context, id, class string) {
	t.Helper()
	if err := b.Authorize(ctx, node(id, class), class); err != nil {
		t.Errorf("node %q class %q: %v, want allowed", id, class, err)
	}
}

func wantDenied(t *testing.T, b *Binder, ctx context.Context, id, class, msg string) {
	t.Helper()
	err := b.Authorize(ctx, node(id, class), class)
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("node %q class %q: %v, want PermissionDenied", id, class, err)
		return
	}
	if !strings.Contains(status.Convert(err).Message(), msg) {
		t.Errorf("node %q class %q: message %q, want it to contain %q", id, class, status.Convert(err).Message(), msg)
	}
}

func TestSPIFFERule(t *testing.T) {
	b := mustBinder(t, Rule{
		SAN:    `spiffe://test/ns/(?P<ns>[a-z-]+)/sa/.+`,
		NodeID: `sidecar~${ns}~.*`,
		Class:  `${ns}`,
	})
	teamA := verifiedPeer(cert(t, []string{"spiffe://test/ns/team-a/sa/x"}))
	wantAllowed(t, b, teamA, "sidecar~team-a~1", "team-a")
	wantAllowed(t, b, teamA, "sidecar~team-a~", "team-a")

	const deniedA = `may not be claimed by client identity [spiffe://test/ns/team-a/sa/x]`
	// Another namespace's class or node id.
	wantDenied(t, b, teamA, "sidecar~team-a~1", "team-b", `node "sidecar~team-a~1" (class "team-b") `+deniedA)
	wantDenied(t, b, teamA, "sidecar~team-b~1", "team-a", deniedA)
	// Templates and SAN are anchored: no prefix or suffix sneaks through.
	wantDenied(t, b, teamA, "x-sidecar~team-a~1", "team-a", deniedA)
	wantDenied(t, b, teamA, "sidecar~team-a~1", "team-a-2", deniedA)
	wantDenied(t, b, verifiedPeer(cert(t, []string{"spiffe://evil/spiffe://test/ns/team-a/sa/x"})), "sidecar~team-a~1", "team-a", "may not be claimed")
	wantDenied(t, b, verifiedPeer(cert(t, []string{"spiffe://test/ns/team-a/sa/"})), "sidecar~team-a~1", "team-a", "may not be claimed")

	// Any of the certificate's identities may match.
	multi := verifiedPeer(cert(t, []string{"spiffe://other/x", "spiffe://test/ns/team-b/sa/y"}, "b.example.com"))
	wantAllowed(t, b, multi, "sidecar~team-b~7", "team-b")
	wantDenied(t, b, multi, "sidecar~team-a~7", "team-a",
		`client identity [spiffe://other/x spiffe://test/ns/team-b/sa/y b.example.com]`)
}

func TestDNSRule(t *testing.T) {
	b := mustBinder(t, Rule{SAN: `([a-z0-9-]+)\.nodes\.example\.com`, NodeID: `$1`, Class: `edge`})
	gw := verifiedPeer(cert(t, nil, "gw-1.nodes.example.com"))
	wantAllowed(t, b, gw, "gw-1", "edge")
	wantDenied(t, b, gw, "gw-2", "edge", `node "gw-2" (class "edge") may not be claimed by client identity [gw-1.nodes.example.com]`)
	wantDenied(t, b, gw, "gw-1", "core", "may not be claimed")
	wantDenied(t, b, verifiedPeer(cert(t, nil, "gw-1.nodes.example.com.evil.org")), "gw-1", "edge", "may not be claimed")
}

// A rule without Class allows any class; later rules are tried when an
// earlier one does not allow the claim.
func TestRuleWithoutClassAndRuleOrder(t *testing.T) {
	b := mustBinder(t,
		Rule{SAN: `spiffe://test/admin`, NodeID: `.*`},
		Rule{SAN: `spiffe://test/sa/(\w+)`, NodeID: `${1}-\d+`, Class: `apps`},
	)
	admin := verifiedPeer(cert(t, []string{"spiffe://test/admin"}))
	wantAllowed(t, b, admin, "anything", "any-class")
	app := verifiedPeer(cert(t, []string{"spiffe://test/sa/web"}))
	wantAllowed(t, b, app, "web-12", "apps")
	wantDenied(t, b, app, "web-x", "apps", "may not be claimed")
	wantDenied(t, b, app, "web-12", "other", "may not be claimed")
}

// A group's value is literal text in the template: its regex
// metacharacters do not widen the pattern.
func TestExpandedValuesAreQuoted(t *testing.T) {
	b := mustBinder(t, Rule{SAN: `spiffe://test/ns/([^/]+)/sa/.+`, NodeID: `$1~.*`, Class: `${1}+`})
	dotted := verifiedPeer(cert(t, []string{"spiffe://test/ns/a.b/sa/x"}))
	wantAllowed(t, b, dotted, "a.b~1", "a.b")
	wantDenied(t, b, dotted, "axb~1", "a.b", "may not be claimed") // "." is not "any character"
	// The quoted value is one atom: ${1}+ repeats the whole value.
	wantAllowed(t, b, dotted, "a.b~1", "a.ba.b")
	wantDenied(t, b, dotted, "a.b~1", "a.bb", "may not be claimed")

	star := verifiedPeer(cert(t, []string{"spiffe://test/ns/.*/sa/x"}))
	wantAllowed(t, b, star, ".*~1", ".*")
	wantDenied(t, b, star, "anything~1", ".*", "may not be claimed")
}

func TestNoVerifiedCertificate(t *testing.T) {
	b := mustBinder(t, Rule{SAN: `.*`, NodeID: `.*`})
	n := node("n", "c")
	c := cert(t, []string{"spiffe://test/x"})
	for name, tc := range map[string]struct {
		ctx context.Context
		msg string
	}{
		"no peer": {context.Background(), "no client certificate"},
		"not TLS": {peer.NewContext(context.Background(), &peer.Peer{}), "no client certificate"},
		"no cert": {peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{}}), "no client certificate"},
		"not verified": {peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
			State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}},
		}}), "not verified"},
		"no SAN": {verifiedPeer(&x509.Certificate{}), "no URI or DNS SAN"},
	} {
		err := b.Authorize(tc.ctx, n, "c")
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), tc.msg) {
			t.Errorf("%s: %v, want PermissionDenied containing %q", name, err, tc.msg)
		}
	}
}

func TestNoRulesAllowsAll(t *testing.T) {
	for _, b := range []*Binder{mustBinder(t), nil} {
		if err := b.Authorize(context.Background(), node("n", "c"), "c"); err != nil {
			t.Errorf("binder %v without rules: %v, want allowed", b, err)
		}
	}
}

func TestNewBinderErrors(t *testing.T) {
	for _, tc := range []struct {
		rules []Rule
		want  string
	}{
		{[]Rule{{SAN: `(`, NodeID: `.*`}}, "rules[0].san: "},
		{[]Rule{{NodeID: `.*`}}, "rules[0].san: required"},
		{[]Rule{{SAN: `x`, NodeID: `.*`}, {SAN: `x`}}, "rules[1].node_id: required"},
		{[]Rule{{SAN: `x`, NodeID: `a(`}}, "rules[0].node_id: "},
		{[]Rule{{SAN: `x`, NodeID: `.*`, Class: `[`}}, "rules[0].class: "},
		{[]Rule{{SAN: `(x)`, NodeID: `$2`}}, "rules[0].node_id: $2 refers to a group the san pattern does not have"},
		{[]Rule{{SAN: `(?P<ns>x)`, NodeID: `.*`, Class: `${nss}`}}, "rules[0].class: $nss refers to a group"},
		{[]Rule{{SAN: `(x)`, NodeID: `$1x`}}, `write ${1}x for group 1 followed by "x"`},
		// The expansion placeholder stands in for the value: "$1*" is valid.
		{[]Rule{{SAN: `(x)`, NodeID: `*$1`}}, "rules[0].node_id: "},
	} {
		_, err := NewBinder(tc.rules)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewBinder(%+v) = %v, want an error containing %q", tc.rules, err, tc.want)
			continue
		}
		// The rule and field are typed, so callers need not parse the text.
		var re *RuleError
		if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), fmt.Sprintf("rules[%d].%s: ", re.Index, re.Field)) {
			t.Errorf("NewBinder(%+v) = %v (%T), want a RuleError naming the rule and field", tc.rules, err, err)
		}
	}
	if _, err := NewBinder([]Rule{{SAN: `(x)`, NodeID: `$1*`, Class: `$$`}}); err != nil {
		t.Errorf("valid rule: %v", err)
	}
}

func TestExpand(t *testing.T) {
	repl := func(name string, num int) string {
		if num >= 0 {
			return "<" + name + ">"
		}
		return "{" + name + "}"
	}
	for tmpl, want := range map[string]string{
		`a$1b`:          `a{1b}`,
		`a${1}b`:        `a<1>b`,
		`$ns~${ns}~$`:   `{ns}~{ns}~$`,
		`$$1`:           `$1`,
		`x$-y${`:        `x$-y${`,
		`${01}$0`:       `{01}<0>`,
		`sidecar~.*$`:   `sidecar~.*$`,
		`${a b}`:        `${a b}`,
		`$ü_1`:          `{ü_1}`,
		`no references`: `no references`,
	} {
		if got := expand(tmpl, repl); got != want {
			t.Errorf("expand(%q) = %q, want %q", tmpl, got, want)
		}
	}
}
