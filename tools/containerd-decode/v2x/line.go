// Package v2x is what containerd's 2.x lines share: reading the CRI plugins' config from a
// loaded config.toml and decoding runhcs options, called from the containerd module each
// line pins (../v2 for 2.2, ../v2.3 for 2.3). Only loading the file differs between them.
package v2x

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

// Load reads a root config.toml with its imports into a Config migrated to the line's
// config version, as that line's `containerd config dump` and daemon do before they decode
// any plugin's table.
type Load func(ctx context.Context, path string) (*srvconfig.Config, error)

// Line is one containerd 2.x release (the one its module pins) with its way of loading.
type Line struct {
	Load Load
}

var _ check.EffectiveLine = Line{}

func (Line) Name() string {
	return fmt.Sprintf("containerd %s (config version %d)",
		strings.TrimSuffix(version.Version, "+unknown"), version.ConfigVersion)
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

// LoadRuntimes loads a config.toml and decodes the CRI runtime plugin's table into its
// registered default config, as srvconfig.Config.Decode does for `containerd config dump`
// (cmd/containerd/command/config.go outputConfig, unexported) and for the daemon. That
// config's type is internal to containerd, so its runtimes are read by reflection.
func (l Line) LoadRuntimes(path string) (map[string]check.Runtime, error) {
	config, err := l.Load(context.Background(), path)
	if err != nil {
		return nil, err
	}
	decoded, err := decode(config, criRuntime, pristine)
	if err != nil {
		return nil, err
	}
	return runtimesOf(decoded)
}

// LoadSandboxImage is the images plugin's PinnedImages["sandbox"] as loaded above: what
// internal/cri/server/podsandbox/sandbox_run.go asks for as PinnedImage("sandbox").
func (l Line) LoadSandboxImage(path string) (string, error) {
	config, err := l.Load(context.Background(), path)
	if err != nil {
		return "", err
	}
	images, err := decode(config, criImages, pristineImages)
	if err != nil {
		return "", err
	}
	return pinnedSandbox(images)
}

// LoadEffective loads a root config.toml with its imports once and reads both CRI plugins'
// tables from it. 2.x keeps no list of the files it read (Config.Imports is the union of
// the files' patterns), so check.LoadOrder names them.
func (l Line) LoadEffective(path string) (check.Effective, error) {
	config, err := l.Load(context.Background(), path)
	if err != nil {
		return check.Effective{}, err
	}
	files, err := check.LoadOrder(path, toml.Unmarshal)
	if err != nil {
		return check.Effective{}, err
	}
	runtime, err := decode(config, criRuntime, pristine)
	if err != nil {
		return check.Effective{}, err
	}
	runtimes, err := runtimesOf(runtime)
	if err != nil {
		return check.Effective{}, err
	}
	images, err := decode(config, criImages, pristineImages)
	if err != nil {
		return check.Effective{}, err
	}
	sandbox, err := pinnedSandbox(images)
	if err != nil {
		return check.Effective{}, err
	}
	return check.Effective{
		Version:            config.Version,
		Files:              files,
		Runtimes:           runtimes,
		DefaultRuntimeName: stringField(runtime, "ContainerdConfig", "DefaultRuntimeName"),
		SandboxImage:       sandbox,
		Snapshotter:        stringField(images, "Snapshotter"),
	}, nil
}

// decode is srvconfig.Config.Decode of one plugin's table into a fresh copy of its
// registered default.
func decode(config *srvconfig.Config, r plugin.Registration, defaults []byte) (any, error) {
	fresh := reflect.New(reflect.TypeOf(r.Config).Elem()).Interface()
	if err := toml.Unmarshal(defaults, fresh); err != nil {
		return nil, fmt.Errorf("reading back the default config of %s: %w", r.URI(), err)
	}
	decoded, err := config.Decode(context.Background(), r.URI(), fresh)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", r.URI(), err)
	}
	return decoded, nil
}

// structOf is the struct a decoded config points at.
func structOf(decoded any) reflect.Value {
	v := reflect.ValueOf(decoded)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	return v
}

// stringField reads a string field (through nested struct fields) of a decoded config.
func stringField(decoded any, path ...string) string {
	v := structOf(decoded)
	for _, name := range path {
		v = v.FieldByName(name)
	}
	text, _ := v.Interface().(string)
	return text
}

// pinnedSandbox is PinnedImages["sandbox"] of the images plugin's decoded config.
func pinnedSandbox(images any) (string, error) {
	pinned, ok := structOf(images).FieldByName("PinnedImages").Interface().(map[string]string)
	if !ok {
		return "", fmt.Errorf("%T has no PinnedImages map", images)
	}
	return pinned["sandbox"], nil
}

// runtimesOf reads ContainerdConfig.Runtimes (map[string]Runtime{Type, PodAnnotations,
// ContainerAnnotations, Options, ...}) of the internal criconfig.RuntimeConfig.
func runtimesOf(decoded any) (map[string]check.Runtime, error) {
	v := structOf(decoded)
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
		runtimePath, _ := rt.FieldByName("Path").Interface().(string)
		snapshotter, _ := rt.FieldByName("Snapshotter").Interface().(string)
		opts, ok := rt.FieldByName("Options").Interface().(map[string]any)
		if !ok {
			return nil, fmt.Errorf("runtime %s: Options is not a map[string]any", iter.Key())
		}
		pod, _ := rt.FieldByName("PodAnnotations").Interface().([]string)
		container, _ := rt.FieldByName("ContainerAnnotations").Interface().([]string)
		out[iter.Key().String()] = check.Runtime{
			Type: typ, Path: runtimePath, PodAnnotations: pod, ContainerAnnotations: container,
			Options: opts, Snapshotter: snapshotter,
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
