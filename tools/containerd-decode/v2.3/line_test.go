package line

import (
	"testing"

	"wcow.dev/tools/containerd-decode/check"
)

// A root config.toml loaded with its imports, written out as JSON for the Python tests.
func TestEffectiveConfig(t *testing.T) { check.EffectiveConfig(t, Line) }
