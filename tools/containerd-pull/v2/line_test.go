package line

import (
	"testing"

	"wcow.dev/tools/containerd-pull/check"
)

// Every case of the fixture through the client and transfer paths of this line.
func TestPullCases(t *testing.T) { check.Run(t, Line{}) }
