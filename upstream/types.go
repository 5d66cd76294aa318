package upstream

// The resource types the relay can decode to validate upstream responses.
import _ "github.com/xds-relay/xds-relay/upstream/xdstypes"
