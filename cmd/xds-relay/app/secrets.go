package app

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/relay/identity"
)

// secretTypes are the messages of SDS Secrets (v3, and v2 in case an
// upstream still serves it), matched after the type URL's last "/" so that
// no spelling of the prefix gets around the check.
var secretTypes = map[string]bool{
	"envoy.extensions.transport_sockets.tls.v3.Secret": true,
	"envoy.api.v2.auth.Secret":                         true,
}

// isSecretType reports whether typeURL names an SDS Secret.
func isSecretType(typeURL string) bool {
	return secretTypes[typeURL[strings.LastIndexByte(typeURL, '/')+1:]]
}

// secretsGate is relay.Options.AuthorizeType: Secrets (private keys) go only
// to peers with a verified client certificate, unless allow
// (tls.allow_secrets_without_client_cert) says otherwise.
func secretsGate(allow bool) func(context.Context, string) error {
	if allow {
		return nil
	}
	return func(ctx context.Context, typeURL string) error {
		if !isSecretType(typeURL) {
			return nil
		}
		if err := identity.VerifiedClientCert(ctx); err != nil {
			return status.Errorf(codes.PermissionDenied,
				"type_url %q: Secrets are served only to clients with a verified client certificate (tls.client_ca_file), and this client has none (%s); set tls.allow_secrets_without_client_cert: true to serve them anyway",
				typeURL, status.Convert(err).Message())
		}
		return nil
	}
}
