package clock_test

import (
	"testing"

	"go.uber.org/goleak"
)

// WithTimeout starts a goroutine per context: none may outlive its cancel.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
