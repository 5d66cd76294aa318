package app_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives the tests: the relay,
// the management servers, the backends and the clients the tests start must
// all be stopped by the tests' cleanups.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
