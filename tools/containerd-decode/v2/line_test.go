package line

import (
	"os"
	"path/filepath"
	"testing"

	"wcow.dev/tools/containerd-decode/check"
)

// The rendered version-3 fragment (containerd 2.0-2.2's schema), every handler of the plan.
func TestRenderedFragmentV3(t *testing.T) { check.RenderedFragment(t, Line, 3) }

// The version-2 fragment as 2.x reads it: migrated from io.containerd.grpc.v1.cri (a node
// upgraded from 1.7 keeps its version-2 config.toml).
func TestRenderedFragmentV2Migrated(t *testing.T) { check.RenderedFragment(t, Line, 2) }

// A containerd 2.x config.toml (version 3) with the plan merged in by the agent.
func TestMergedConfig(t *testing.T) { check.MergedConfig(t, Line) }

// A config.toml where the agent set the pause image (--pause-image): pinned_images.sandbox
// of io.containerd.cri.v1.images (or a version-2 sandbox_image, migrated there).
func TestPauseImage(t *testing.T) { check.PauseImage(t, Line) }

// Every option of the project's table (RUNHCS_OPTIONS) is a field of this line's Options.
func TestEveryKnownOption(t *testing.T) { check.KnownOptions(t, Line) }

func runhcs(options map[string]any) check.Runtime {
	return check.Runtime{Type: check.RunhcsV1, Options: options}
}

func TestMisspeltKeyIsReported(t *testing.T) {
	check.ExpectProblem(t, Line, runhcs(map[string]any{
		"SandboxIsolation": int64(1), "VmProcessorCont": int64(2),
	}), "VmProcessorCont")
}

// go-toml v2 matches keys ignoring case, so 2.x takes casings that 1.x drops (see ../v1.7).
func TestOtherCasingDecodes(t *testing.T) {
	rt := runhcs(map[string]any{"ScaleCPULimitsToSandbox": true})
	if problems := check.Problems(Line, rt); len(problems) != 0 {
		t.Fatalf("problems: %q", problems)
	}
}

func TestWrongTypeIsReported(t *testing.T) {
	check.ExpectProblem(t, Line, runhcs(map[string]any{
		"SandboxIsolation": int64(1), "VmProcessorCount": "two",
	}), "VmProcessorCount")
	check.ExpectProblem(t, Line, runhcs(map[string]any{
		"SandboxIsolation": "HYPERVISOR",
	}), "SandboxIsolation")
}

func TestMisspeltSubtableIsReported(t *testing.T) {
	check.ExpectProblem(t, Line, runhcs(map[string]any{
		"DefaultContainerAnnotation": map[string]any{"io.microsoft.virtualmachine.x": "1"},
	}), "DefaultContainerAnnotation")
}

// The same faults in a config file, through the loader: nothing on the way hides them.
func TestFaultsInAConfigFileAreReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.toml")
	text := `version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.bad]
runtime_type = "io.containerd.runhcs.v1"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.bad.options]
SandboxIsolation = 1
VmProcessorCont = 2
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.wrongtype]
runtime_type = "io.containerd.runhcs.v1"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.wrongtype.options]
VmMemorySizeInMb = "2048"
`
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := Line.LoadRuntimes(path)
	if err != nil {
		t.Fatal(err)
	}
	check.ExpectProblem(t, Line, loaded["bad"], "VmProcessorCont")
	check.ExpectProblem(t, Line, loaded["wrongtype"], "VmMemorySizeInMb")
}

// A correct table has no problems, so the reports above are about the faults alone.
func TestCorrectOptionsPass(t *testing.T) {
	rt := runhcs(map[string]any{
		"SandboxIsolation": int64(1), "VmProcessorCount": int64(2), "VmMemorySizeInMb": int64(2048),
		"ScaleCpuLimitsToSandbox": true, "SandboxPlatform": "windows/amd64",
		"DefaultContainerAnnotations": map[string]any{"io.microsoft.virtualmachine.x": "1"},
	})
	if problems := check.Problems(Line, rt); len(problems) != 0 {
		t.Fatalf("problems with correct options: %q", problems)
	}
}

// A root config.toml loaded with its imports, written out as JSON for the Python tests.
func TestEffectiveConfig(t *testing.T) { check.EffectiveConfig(t, Line) }
