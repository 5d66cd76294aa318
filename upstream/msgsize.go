package upstream

import (
	"fmt"
	"math"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxMessageBytes is the largest upstream response the relay accepts
// by default (Config.MaxMessageBytes, upstream.max_message_bytes): 64 MiB,
// well above a mesh's CDS state of tens of MB (70,000 clusters are about
// 5.6 MB) and gRPC's own 4 MiB default.
const DefaultMaxMessageBytes = 64 << 20

// MaxMessageKey names the limit in NACKs, logs and errors.
const MaxMessageKey = "upstream.max_message_bytes"

// transportCeiling is how large a message gRPC reads for a class stream:
// twice the key, so a response over the key is still read whole and NACKed
// by nonce rather than failing the stream unanswered. One beyond even this
// fails the stream, which reconnects under the growing backoff (run).
func transportCeiling(maxMsg int) int {
	if maxMsg > math.MaxInt32/2 {
		return math.MaxInt32
	}
	return 2 * maxMsg
}

// oversized rejects a response of n bytes when it is over maxMsg.
func oversized(n, maxMsg int) error {
	if n <= maxMsg {
		return nil
	}
	return reject("response of %d bytes is over %s (%d)", n, MaxMessageKey, maxMsg)
}

// receiveError names the ceiling when gRPC refused a message as too large.
func receiveError(err error, maxMsg int) error {
	if status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("receive: a response over the transport ceiling of %d bytes (twice %s): %w", transportCeiling(maxMsg), MaxMessageKey, err)
	}
	return fmt.Errorf("receive: %w", err)
}
