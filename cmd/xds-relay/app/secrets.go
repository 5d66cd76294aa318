package app

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/xds-relay/xds-relay/relay/identity"
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// secretsGate is relay.Options.AuthorizeType: Secrets (private keys) go only
// to peers with a verified client certificate, unless allow
// (tls.allow_secrets_without_client_cert) says otherwise.
func secretsGate(allow bool) func(context.Context, string) error {
	if allow {
		return nil
	}
	return func(ctx context.Context, typeURL string) error {
		if !xdstype.IsSecret(typeURL) {
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
