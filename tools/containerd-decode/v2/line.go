// Package line is containerd 2.x's config loading and runhcs option decoding, called from
// the containerd module itself (pinned in go.mod), for the checks in ../check.
package line

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	runhcsoptions "github.com/Microsoft/hcsshim/cmd/containerd-shim-runhcs-v1/options"
	srvconfig "github.com/containerd/containerd/v2/cmd/containerd/server/config"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/containerd/v2/version"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
	"github.com/pelletier/go-toml/v2"

	// Registers the CRI runtime config plugin (io.containerd.cri.v1.runtime): its default
	// config and its migration of version-2 `io.containerd.grpc.v1.cri` tables.
	_ "github.com/containerd/containerd/v2/plugins/cri/runtime"
	// Registers the CRI images plugin (io.containerd.cri.v1.images): pinned_images, and the
	// migration of a version-2 sandbox_image.
	_ "github.com/containerd/containerd/v2/plugins/cri/images"

	"wcow.dev/tools/containerd-decode/check"
)

// Line is containerd 2.x (see go.mod for the exact release and the hcsshim it pins).
type Line struct{}

var _ check.Line = Line{}

func (Line) Name() string {
	return fmt.Sprintf("containerd 2.x (config version %d)", version.ConfigVersion)
}

// The CRI runtime plugin's registration and its default config as registered. containerd
// decodes a file into the registration's own Config once per process; the tests load several
// files in one process, so each load decodes into a fresh copy of the pristine default
// (written out and read back with containerd's go-toml, as `config default` output would be).
var criRuntime, pristine = registered(string(plugins.CRIServicePlugin) + ".runtime")

// The CRI images plugin (io.containerd.cri.v1.images): its config holds pinned_images, and
// its migration moves a version-2 sandbox_image there.
var criImages, pristineImages = registered(string(plugins.CRIServicePlugin) + ".images")

func registered(uri string) (plugin.Registration, []byte) {
	for _, r := range registry.Graph(func(*plugin.Registration) bool { return false }) {
		if r.URI() == uri {
			text, err := toml.Marshal(r.Config)
			if err != nil {
				panic(fmt.Sprintf("writing the default config of %s: %v", uri, err))
			}
			return r, text
		}
	}
	panic(uri + " is not registered")
}

// LoadRuntimes does what `containerd config dump` does on 2.x (cmd/containerd/command/
// config.go dumpConfig and outputConfig, unexported): srvconfig.LoadConfig over a default of
// the current config version, each registered plugin's ConfigMigration when the file is
// older, then srvconfig.Config.Decode of the CRI runtime plugin's table into its config.
// That config's type is internal to containerd, so its runtimes are read by reflection.
func (Line) LoadRuntimes(path string) (map[string]check.Runtime, error) {
	decoded, err := load(path, criRuntime, pristine)
	if err != nil {
		return nil, err
	}
	return runtimesOf(decoded)
}

// LoadSandboxImage is the images plugin's PinnedImages["sandbox"] as loaded above: what
// internal/cri/server/podsandbox/sandbox_run.go asks for as PinnedImage("sandbox").
func (Line) LoadSandboxImage(path string) (string, error) {
	decoded, err := load(path, criImages, pristineImages)
	if err != nil {
		return "", err
	}
	v := reflect.ValueOf(decoded)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	pinned, ok := v.FieldByName("PinnedImages").Interface().(map[string]string)
	if !ok {
		return "", fmt.Errorf("%T has no PinnedImages map", decoded)
	}
	return pinned["sandbox"], nil
}

// load reads a config.toml as `containerd config dump` does and decodes one plugin's table
// into a fresh copy of its registered default.
func load(path string, r plugin.Registration, defaults []byte) (any, error) {
	ctx := context.Background()
	config := &srvconfig.Config{Version: version.ConfigVersion}
	if err := srvconfig.LoadConfig(ctx, path, config); err != nil {
		return nil, err
	}
	if config.Version < version.ConfigVersion {
		for _, p := range registry.Graph(srvconfig.V2DisabledFilter(config.DisabledPlugins)) {
			if p.ConfigMigration != nil {
				if err := p.ConfigMigration(ctx, config.Version, config.Plugins); err != nil {
					return nil, fmt.Errorf("migrating %s: %w", p.URI(), err)
				}
			}
		}
	}
	fresh := reflect.New(reflect.TypeOf(r.Config).Elem()).Interface()
	if err := toml.Unmarshal(defaults, fresh); err != nil {
		return nil, fmt.Errorf("reading back the default config of %s: %w", r.URI(), err)
	}
	decoded, err := config.Decode(ctx, r.URI(), fresh)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r.URI(), err)
	}
	return decoded, nil
}

// runtimesOf reads ContainerdConfig.Runtimes (map[string]Runtime{Type, PodAnnotations,
// ContainerAnnotations, Options, ...}) of the internal criconfig.RuntimeConfig.
func runtimesOf(decoded any) (map[string]check.Runtime, error) {
	v := reflect.ValueOf(decoded)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("the CRI runtime config decoded to %T", decoded)
	}
	runtimes := v.FieldByName("ContainerdConfig").FieldByName("Runtimes")
	if !runtimes.IsValid() || runtimes.Kind() != reflect.Map {
		return nil, fmt.Errorf("%T has no ContainerdConfig.Runtimes map", decoded)
	}
	out := map[string]check.Runtime{}
	iter := runtimes.MapRange()
	for iter.Next() {
		rt := iter.Value()
		typ, _ := rt.FieldByName("Type").Interface().(string)
		opts, ok := rt.FieldByName("Options").Interface().(map[string]any)
		if !ok {
			return nil, fmt.Errorf("runtime %s: Options is not a map[string]any", iter.Key())
		}
		pod, _ := rt.FieldByName("PodAnnotations").Interface().([]string)
		container, _ := rt.FieldByName("ContainerAnnotations").Interface().([]string)
		out[iter.Key().String()] = check.Runtime{
			Type: typ, PodAnnotations: pod, ContainerAnnotations: container, Options: opts,
		}
	}
	return out, nil
}

// Decode is the runhcs branch of internal/cri/config GenerateRuntimeOptions, which Go does
// not let another module import: toml.Marshal(r.Options), then toml.Unmarshal into the type
// getRuntimeOptionsType picks for io.containerd.runhcs.v1, hcsshim's runhcs Options. Same
// go-toml/v2 as containerd, by go.mod.
func (Line) Decode(rt check.Runtime) (any, error) {
	if rt.Type != check.RunhcsV1 {
		return nil, fmt.Errorf("only %s is decoded here, not %q", check.RunhcsV1, rt.Type)
	}
	text, err := toml.Marshal(rt.Options)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal TOML blob for runtime %q: %w", rt.Type, err)
	}
	options := &runhcsoptions.Options{}
	if err := toml.Unmarshal(text, options); err != nil {
		return nil, err
	}
	return options, nil
}

// Undecoded runs the same bytes through the same decoder with DisallowUnknownFields, the
// mode containerd's own srvconfig.Config.Decode uses to warn about unknown plugin keys.
func (Line) Undecoded(rt check.Runtime) ([]string, error) {
	text, err := toml.Marshal(rt.Options)
	if err != nil {
		return nil, err
	}
	err = toml.NewDecoder(bytes.NewReader(text)).DisallowUnknownFields().
		Decode(&runhcsoptions.Options{})
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) {
		keys := make([]string, 0, len(strict.Errors))
		for _, e := range strict.Errors {
			keys = append(keys, strings.Join(e.Key(), "."))
		}
		return keys, nil
	}
	return nil, err
}
