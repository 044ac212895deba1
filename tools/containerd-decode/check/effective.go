package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// What TestEffectiveConfig reads; tests/containerd_lines.py sets them.
const (
	// EnvEffectiveConfig is a root config.toml, loaded with its imports.
	EnvEffectiveConfig = "WCOW_EFFECTIVE_CONFIG"
	// EnvEffectiveOut is where the JSON description of what the line made of it is written.
	EnvEffectiveOut = "WCOW_EFFECTIVE_OUT"
)

// Effective is a root config.toml as a line loads it with its imports: the parts of the
// merged configuration the agent relies on.
type Effective struct {
	// Version is the merged config's version as the line's loader leaves it (1.7: 1 or 2;
	// 2.2: the last file's version that set one, migrated afterwards; 2.3: always 4, each
	// file being migrated before it is merged).
	Version int
	// Files are the config files read, in the order they were merged (root first).
	Files []string
	// Runtimes are the CRI plugin's runtime handlers, defaults included.
	Runtimes           map[string]Runtime
	DefaultRuntimeName string
	// SandboxImage is the pause image the CRI plugin runs sandboxes from.
	SandboxImage string
	// Snapshotter is the CRI plugin's default snapshotter (a runtime may name its own).
	Snapshotter string
}

// EffectiveLine is a line that can load a root config.toml with its imports.
type EffectiveLine interface {
	Line
	// LoadEffective loads path as the line's daemon does (the same loading as `containerd
	// config dump`, except that a missing import is an error, as it is for the daemon).
	LoadEffective(path string) (Effective, error)
}

// LoadOrder lists the files a loader reads from root, in the order it merges them: root,
// then each file's imports breadth-first, relative paths joined to the importing file's
// directory, patterns with `*` expanded by filepath.Glob (sorted), a file read twice only
// once. It is the walk of LoadConfig and its unexported resolveImports, the same in 1.7 and
// 2.x; loading itself is left to containerd, this only names the files. Each file's
// `imports` is read with unmarshal, the Unmarshal of the line's own go-toml.
func LoadOrder(root string, unmarshal func([]byte, any) error) ([]string, error) {
	var order []string
	loaded := map[string]bool{}
	pending := []string{root}
	for len(pending) > 0 {
		path := pending[0]
		pending = pending[1:]
		if loaded[path] {
			continue
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var file struct {
			Imports []string `toml:"imports"`
		}
		if err := unmarshal(text, &file); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		loaded[path] = true
		order = append(order, path)
		for _, imp := range file.Imports {
			imp = filepath.Clean(imp)
			if !filepath.IsAbs(imp) {
				imp = filepath.Join(filepath.Dir(path), imp)
			}
			if !strings.Contains(imp, "*") {
				pending = append(pending, imp)
				continue
			}
			matches, err := filepath.Glob(imp)
			if err != nil {
				return nil, err
			}
			pending = append(pending, matches...)
		}
	}
	return order, nil
}

// effectiveRuntime is one handler in the JSON written by EffectiveConfig.
type effectiveRuntime struct {
	Type                 string   `json:"runtime_type"`
	Path                 string   `json:"runtime_path"`
	Options              any      `json:"options"`
	OptionsDecoded       bool     `json:"options_decoded"`
	OptionsError         *string  `json:"options_error"`
	UndecodedOptions     []string `json:"undecoded_options"`
	PodAnnotations       []string `json:"pod_annotations"`
	ContainerAnnotations []string `json:"container_annotations"`
	Snapshotter          string   `json:"snapshotter"`
}

// effectiveJSON is the document EffectiveConfig writes (see ../README.md).
type effectiveJSON struct {
	Line               string                      `json:"line"`
	Version            *int                        `json:"version"`
	Imports            []string                    `json:"imports"`
	Runtimes           map[string]effectiveRuntime `json:"runtimes"`
	DefaultRuntimeName *string                     `json:"default_runtime_name"`
	SandboxImage       *string                     `json:"sandbox_image"`
	Snapshotter        *string                     `json:"snapshotter"`
	Error              *string                     `json:"error"`
}

// EffectiveConfig loads the root config.toml named by EnvEffectiveConfig with the line and
// writes what it made of it to EnvEffectiveOut as JSON. A load error is written to "error"
// and the test passes: refusing a file is an answer, not a fault of the check.
func EffectiveConfig(t *testing.T, line EffectiveLine) {
	t.Helper()
	root := env(t, EnvEffectiveConfig, "a root config.toml to load with its imports")
	out := env(t, EnvEffectiveOut, "where to write the effective configuration as JSON")
	doc := effectiveJSON{Line: line.Name(), Imports: []string{}, Runtimes: map[string]effectiveRuntime{}}
	loaded, err := line.LoadEffective(root)
	if err != nil {
		text := err.Error()
		doc.Error = &text
	} else {
		doc.Version = &loaded.Version
		doc.Imports = loaded.Files
		doc.DefaultRuntimeName = &loaded.DefaultRuntimeName
		doc.SandboxImage = &loaded.SandboxImage
		doc.Snapshotter = &loaded.Snapshotter
		for name, rt := range loaded.Runtimes {
			doc.Runtimes[name] = describe(line, rt)
		}
	}
	text, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, text, 0o600); err != nil {
		t.Fatal(err)
	}
}

// describe is one handler as the CRI plugin would use it: runhcs options decoded into
// hcsshim's Options (the fields that are set, by Go name), any other table as loaded.
func describe(line Line, rt Runtime) effectiveRuntime {
	out := effectiveRuntime{
		Type:                 rt.Type,
		Path:                 rt.Path,
		Options:              rt.Options,
		UndecodedOptions:     []string{},
		PodAnnotations:       orEmpty(rt.PodAnnotations),
		ContainerAnnotations: orEmpty(rt.ContainerAnnotations),
		Snapshotter:          rt.Snapshotter,
	}
	if rt.Type != RunhcsV1 || rt.Options == nil {
		return out
	}
	decoded, err := line.Decode(rt)
	if err != nil {
		text := err.Error()
		out.OptionsError = &text
		return out
	}
	out.Options = setFields(decoded)
	out.OptionsDecoded = true
	if undecoded, err := line.Undecoded(rt); err == nil {
		out.UndecodedOptions = orEmpty(undecoded)
	} else {
		text := err.Error()
		out.OptionsError = &text
	}
	return out
}

// setFields is a decoded options struct as {Go field name: value} for the fields that are
// not their zero value (an optional field counts when it points at something), leaving out
// protobuf's bookkeeping (XXX_ fields of gogo, unexported state of protoc-gen-go).
func setFields(decoded any) map[string]any {
	v := reflect.ValueOf(decoded)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	out := map[string]any{}
	for i := range v.NumField() {
		field := v.Type().Field(i)
		if !field.IsExported() || strings.HasPrefix(field.Name, "XXX_") || v.Field(i).IsZero() {
			continue
		}
		out[field.Name] = v.Field(i).Interface()
	}
	return out
}

func orEmpty(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}
