// Package check judges rendered runtime handlers against one containerd line's own config
// loading and option decoding. Each containerd line (a Go module of its own, because 1.7 and
// 2.x pin different hcsshim releases) supplies a Line; the checks here are the same for all.
package check

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// RunhcsV1 is the runtime type whose options containerd decodes into hcsshim's runhcs Options.
const RunhcsV1 = "io.containerd.runhcs.v1"

// Runtime is one `runtimes.<handler>` table as containerd's CRI config holds it.
type Runtime struct {
	Type                 string
	Path                 string // runtime_path
	PodAnnotations       []string
	ContainerAnnotations []string
	Options              map[string]any
	Snapshotter          string // the handler's own snapshotter, if it names one
}

// Line is one containerd release line: its config loader and its option decoder.
type Line interface {
	// Name says which containerd and hcsshim the line is, for messages.
	Name() string
	// LoadRuntimes loads a config.toml the way `containerd config dump` does and returns the
	// CRI plugin's runtime handlers as containerd decoded them.
	LoadRuntimes(path string) (map[string]Runtime, error)
	// Decode turns a runtime's options into the runtime's options type (hcsshim's Options for
	// runhcs), by the call sequence the CRI plugin uses when it creates a sandbox.
	Decode(rt Runtime) (any, error)
	// Undecoded lists the option keys (dotted paths) the same decoder leaves unused.
	Undecoded(rt Runtime) ([]string, error)
}

// Problems says what containerd would not do with a runtime's options: keys it drops, values
// it cannot decode, values that decode to something else. Empty means every key arrived.
func Problems(line Line, rt Runtime) []string {
	if rt.Type != RunhcsV1 {
		return []string{fmt.Sprintf("runtime_type is %q, not %q", rt.Type, RunhcsV1)}
	}
	if rt.Options == nil {
		return []string{"the options table is missing"}
	}
	decoded, err := line.Decode(rt)
	if err != nil {
		return decodeFailures(line, rt, err)
	}
	undecoded, err := line.Undecoded(rt)
	if err != nil {
		return []string{fmt.Sprintf("options do not decode strictly: %v", err)}
	}
	var problems []string
	dropped := map[string]bool{}
	for _, key := range undecoded {
		top := strings.SplitN(key, ".", 2)[0]
		dropped[top] = true
		problems = append(problems, fmt.Sprintf(
			"option %q is dropped: no field of %T takes it", key, decoded))
	}
	for _, key := range sortedKeys(rt.Options) {
		if dropped[key] {
			continue
		}
		field, ok := fieldFor(decoded, key)
		if !ok {
			problems = append(problems, fmt.Sprintf(
				"option %q decoded without error but %T has no such field", key, decoded))
			continue
		}
		want, got := canonical(rt.Options[key]), canonical(field)
		if want != got {
			problems = append(problems, fmt.Sprintf(
				"option %q = %s decodes to %s", key, want, got))
		}
	}
	return problems
}

// decodeFailures names the keys that make decoding fail (the decoders' errors do not always
// name them), by decoding each key alone.
func decodeFailures(line Line, rt Runtime, whole error) []string {
	var problems []string
	for _, key := range sortedKeys(rt.Options) {
		one := Runtime{Type: rt.Type, Options: map[string]any{key: rt.Options[key]}}
		if _, err := line.Decode(one); err != nil {
			problems = append(problems, fmt.Sprintf(
				"option %q = %s does not decode: %v", key, canonical(rt.Options[key]), err))
		}
	}
	if len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("options do not decode: %v", whole))
	}
	return problems
}

// fieldFor finds the struct field a key decodes into: the exact Go name, else the one field
// whose name matches ignoring case (what both go-toml versions fall back to, in their ways).
func fieldFor(decoded any, key string) (any, bool) {
	v := reflect.ValueOf(decoded)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil, false
	}
	if f := v.FieldByName(key); f.IsValid() && f.CanInterface() {
		return f.Interface(), true
	}
	var found []reflect.Value
	for i := range v.NumField() {
		if v.Type().Field(i).IsExported() && strings.EqualFold(v.Type().Field(i).Name, key) {
			found = append(found, v.Field(i))
		}
	}
	if len(found) != 1 {
		return nil, false
	}
	return found[0].Interface(), true
}

// canonical is a value's JSON with sorted keys: TOML int64, JSON numbers and Go int32 enums
// of the same number compare equal; pointers (optional fields) compare by what they hold.
func canonical(value any) string {
	b, err := json.Marshal(value)
	if err != nil {
		return fmt.Sprintf("<%T: %v>", value, err)
	}
	return string(b)
}

// Same reports whether two option tables hold the same data (see canonical).
func Same(a, b map[string]any) bool {
	return canonical(a) == canonical(b)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
