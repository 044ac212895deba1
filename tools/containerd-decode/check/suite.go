package check

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What the tests read; tests/integration/test_containerd_decode.py sets them.
const (
	// EnvRendered is a directory written by `wcow render --out` (plan.json and the
	// containerd-config-v<N>.toml fragments).
	EnvRendered = "WCOW_RENDERED"
	// EnvMergedConfig is a whole config.toml written by `wcow-agent merge --write`.
	EnvMergedConfig = "WCOW_MERGED_CONFIG"
	// EnvPauseConfig is a config.toml in which `wcow-agent run --pause-image` set the
	// pause image, and EnvPauseImage that image.
	EnvPauseConfig = "WCOW_PAUSE_CONFIG"
	EnvPauseImage  = "WCOW_PAUSE_IMAGE"
	// EnvMergedExpect is a JSON file in plan.json's shape ({"handlers": {h: {"runtime":
	// {"runtime_type", "options"}}}}) with the handlers the merged file holds, as another
	// TOML parser (Python's tomllib) read them.
	EnvMergedExpect = "WCOW_MERGED_EXPECT"
	// EnvKnownOptions is a JSON file in plan.json's shape whose handlers set every option
	// the project knows (wcow_contract.catalog.runhcs_options.RUNHCS_OPTIONS).
	EnvKnownOptions = "WCOW_KNOWN_OPTIONS"
)

// LoadExpected reads the handlers of a plan.json (or a file in its shape).
func LoadExpected(path string) (map[string]Runtime, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Handlers map[string]struct {
			Runtime struct {
				Type                 string         `json:"runtime_type"`
				PodAnnotations       []string       `json:"pod_annotations"`
				ContainerAnnotations []string       `json:"container_annotations"`
				Options              map[string]any `json:"options"`
			} `json:"runtime"`
		} `json:"handlers"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Handlers) == 0 {
		return nil, fmt.Errorf("%s: no handlers: nothing to check", path)
	}
	out := map[string]Runtime{}
	for name, h := range doc.Handlers {
		options, _ := fromJSON(h.Runtime.Options).(map[string]any)
		out[name] = Runtime{
			Type:                 h.Runtime.Type,
			PodAnnotations:       h.Runtime.PodAnnotations,
			ContainerAnnotations: h.Runtime.ContainerAnnotations,
			Options:              options,
		}
	}
	return out, nil
}

// fromJSON gives JSON numbers the Go types a TOML decoder gives them (int64, float64), so
// options read from JSON can be fed to containerd's decoders like options read from TOML.
func fromJSON(value any) any {
	switch v := value.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[k] = fromJSON(item)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = fromJSON(item)
		}
		return out
	}
	return value
}

func env(t *testing.T, name, what string) string {
	t.Helper()
	value := os.Getenv(name)
	if value == "" {
		t.Skipf("%s is not set (%s); tests/integration/test_containerd_decode.py sets it, "+
			"see tools/containerd-decode/README.md", name, what)
	}
	return value
}

// RenderedFragment loads one rendered fragment (containerd-config-v<version>.toml) with the
// line's config loader and checks every handler of plan.json: present, same runtime type and
// annotation lists, options unchanged by loading, and every option decoded into hcsshim's
// Options.
func RenderedFragment(t *testing.T, line Line, version int) {
	t.Helper()
	dir := env(t, EnvRendered, "a directory written by `wcow render --out`")
	expected, err := LoadExpected(filepath.Join(dir, "plan.json"))
	if err != nil {
		t.Fatal(err)
	}
	fragment := filepath.Join(dir, fmt.Sprintf("containerd-config-v%d.toml", version))
	Handlers(t, line, fragment, expected)
}

// MergedConfig loads a whole config.toml merged by the agent and checks the handlers the
// merge wrote the same way, plus every other runhcs handler in the file (containerd's own).
func MergedConfig(t *testing.T, line Line) {
	t.Helper()
	config := env(t, EnvMergedConfig, "a config.toml written by `wcow-agent merge --write`")
	expectPath := env(t, EnvMergedExpect, "the handlers the merged file holds, as JSON")
	expected, err := LoadExpected(expectPath)
	if err != nil {
		t.Fatal(err)
	}
	loaded := Handlers(t, line, config, expected)
	for _, name := range sortedKeys(loaded) {
		// containerd's own runhcs handlers may have no options table (nothing to decode).
		if _, ours := expected[name]; ours || loaded[name].Type != RunhcsV1 ||
			loaded[name].Options == nil {
			continue
		}
		t.Run("other/"+name, func(t *testing.T) {
			for _, p := range Problems(line, loaded[name]) {
				t.Errorf("%s: handler %s (not the agent's): %s", line.Name(), name, p)
			}
		})
	}
}

// Handlers loads config with the line and checks each expected handler; it returns every
// runtime the loader produced.
func Handlers(t *testing.T, line Line, config string, expected map[string]Runtime) map[string]Runtime {
	t.Helper()
	loaded, err := line.LoadRuntimes(config)
	if err != nil {
		t.Fatalf("%s cannot load %s: %v", line.Name(), config, err)
	}
	for _, name := range sortedKeys(expected) {
		want := expected[name]
		t.Run(name, func(t *testing.T) {
			got, ok := loaded[name]
			if !ok {
				t.Fatalf("%s: handler %s is missing after loading %s (has %s)",
					line.Name(), name, config, strings.Join(sortedKeys(loaded), ", "))
			}
			if got.Type != want.Type {
				t.Errorf("%s: handler %s: runtime_type %q after loading, want %q",
					line.Name(), name, got.Type, want.Type)
			}
			if !sameList(got.PodAnnotations, want.PodAnnotations) ||
				!sameList(got.ContainerAnnotations, want.ContainerAnnotations) {
				t.Errorf("%s: handler %s: annotation lists after loading: pod %s, container %s; "+
					"want pod %s, container %s", line.Name(), name,
					canonical(got.PodAnnotations), canonical(got.ContainerAnnotations),
					canonical(want.PodAnnotations), canonical(want.ContainerAnnotations))
			}
			if !Same(got.Options, want.Options) {
				t.Errorf("%s: handler %s: options changed by loading %s:\n got  %s\n want %s",
					line.Name(), name, config, canonical(got.Options), canonical(want.Options))
			}
			for _, p := range Problems(line, got) {
				t.Errorf("%s: handler %s: %s", line.Name(), name, p)
			}
		})
	}
	return loaded
}

// KnownOptions decodes, without loading a file, handlers that set every option the project
// knows: each must be a field of this line's hcsshim Options that takes a value of the type
// the project declares for it.
func KnownOptions(t *testing.T, line Line) {
	t.Helper()
	path := env(t, EnvKnownOptions, "handlers setting every known option, as JSON")
	expected, err := LoadExpected(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sortedKeys(expected) {
		for _, p := range Problems(line, expected[name]) {
			t.Errorf("%s: handler %s: %s", line.Name(), name, p)
		}
	}
}

// sameList compares annotation lists; absent and empty are the same to containerd.
func sameList(a, b []string) bool {
	return len(a) == 0 && len(b) == 0 || canonical(a) == canonical(b)
}

// ExpectProblem fails unless Problems reports something about key for these options: the
// proof that a misspelt key or a wrong type cannot pass the check.
func ExpectProblem(t *testing.T, line Line, rt Runtime, key string) {
	t.Helper()
	problems := Problems(line, rt)
	for _, p := range problems {
		if strings.Contains(p, key) {
			t.Logf("%s reports, as it must: %s", line.Name(), p)
			return
		}
	}
	t.Errorf("%s: no problem reported about %q for options %s (problems: %q)",
		line.Name(), key, canonical(rt.Options), problems)
}

// PauseLine is a line that also reads the pause (sandbox) image its CRI plugin runs with.
type PauseLine interface {
	Line
	// LoadSandboxImage loads a config.toml as LoadRuntimes does and returns the pause image
	// the CRI plugin decoded from it.
	LoadSandboxImage(path string) (string, error)
}

// PauseImage loads the config.toml the agent wrote with --pause-image and checks that the
// line's own decoding of it yields that image (the key the agent wrote is the one read).
func PauseImage(t *testing.T, line PauseLine) {
	t.Helper()
	config := env(t, EnvPauseConfig, "a config.toml where the agent set the pause image")
	want := env(t, EnvPauseImage, "the pause image the agent set")
	got, err := line.LoadSandboxImage(config)
	if err != nil {
		t.Fatalf("%s: %v", line.Name(), err)
	}
	if got != want {
		t.Errorf("%s runs sandboxes from %q, not the %q the agent set", line.Name(), got, want)
	}
}
