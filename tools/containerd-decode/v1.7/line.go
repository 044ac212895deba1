// Package line is containerd 1.7's config loading and runhcs option decoding, called from
// the containerd module itself (pinned in go.mod), for the checks in ../check.
package line

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	runhcsoptions "github.com/Microsoft/hcsshim/cmd/containerd-shim-runhcs-v1/options"
	criconfig "github.com/containerd/containerd/pkg/cri/config"
	"github.com/containerd/containerd/plugin"
	srvconfig "github.com/containerd/containerd/services/server/config"
	toml "github.com/pelletier/go-toml"

	"wcow.dev/tools/containerd-decode/check"
)

// Line is containerd 1.7 (see go.mod for the exact release and the hcsshim it pins).
type Line struct{}

var _ check.EffectiveLine = Line{}

func (Line) Name() string { return "containerd 1.7" }

// LoadRuntimes does what `containerd config dump` does on 1.7 (cmd/containerd/command/
// config.go): srvconfig.LoadConfig over a version-1 default, then the CRI plugin's config is
// decoded by srvconfig.Config.Decode into criconfig.DefaultConfig(). The registration is
// built here with the Type, ID and Config of pkg/cri/cri.go's init, instead of importing
// pkg/cri (which would compile the whole CRI server for one struct).
func (Line) LoadRuntimes(path string) (map[string]check.Runtime, error) {
	_, cri, err := load(path)
	if err != nil {
		return nil, err
	}
	return runtimesOf(cri), nil
}

func runtimesOf(cri *criconfig.PluginConfig) map[string]check.Runtime {
	out := map[string]check.Runtime{}
	for name, rt := range cri.ContainerdConfig.Runtimes {
		out[name] = check.Runtime{
			Type:                 rt.Type,
			Path:                 rt.Path,
			PodAnnotations:       rt.PodAnnotations,
			ContainerAnnotations: rt.ContainerAnnotations,
			Options:              rt.Options,
			Snapshotter:          rt.Snapshotter,
		}
	}
	return out
}

// LoadSandboxImage is PluginConfig.SandboxImage (`sandbox_image`) as loaded above: what
// pkg/cri/server/sandbox_run.go pulls and runs each pod sandbox from.
func (Line) LoadSandboxImage(path string) (string, error) {
	_, cri, err := load(path)
	if err != nil {
		return "", err
	}
	return cri.SandboxImage, nil
}

// LoadEffective loads a root config.toml with its imports as above. LoadConfig itself
// replaces Config.Imports with the files it read, from a map (unordered): check.LoadOrder
// names them in merge order, and must name the same files.
func (Line) LoadEffective(path string) (check.Effective, error) {
	config, cri, err := load(path)
	if err != nil {
		return check.Effective{}, err
	}
	files, err := check.LoadOrder(path, toml.Unmarshal)
	if err != nil {
		return check.Effective{}, err
	}
	if !slices.Equal(slices.Sorted(slices.Values(files)), slices.Sorted(slices.Values(config.Imports))) {
		return check.Effective{}, fmt.Errorf("containerd read %q, the walk of its imports %q",
			config.Imports, files)
	}
	return check.Effective{
		Version:            config.Version,
		Files:              files,
		Runtimes:           runtimesOf(cri),
		DefaultRuntimeName: cri.ContainerdConfig.DefaultRuntimeName,
		SandboxImage:       cri.SandboxImage,
		Snapshotter:        cri.ContainerdConfig.Snapshotter,
	}, nil
}

// load is srvconfig.LoadConfig over a version-1 default, as `containerd config dump` and
// the daemon do, then the CRI plugin's table decoded into criconfig.DefaultConfig().
func load(path string) (*srvconfig.Config, *criconfig.PluginConfig, error) {
	config := &srvconfig.Config{Version: 1}
	if err := srvconfig.LoadConfig(path, config); err != nil {
		return nil, nil, err
	}
	defaults := criconfig.DefaultConfig()
	registration := &plugin.Registration{Type: plugin.GRPCPlugin, ID: "cri", Config: &defaults}
	decoded, err := config.Decode(registration)
	if err != nil {
		return nil, nil, fmt.Errorf("decoding the CRI plugin's config: %w", err)
	}
	cri, ok := decoded.(*criconfig.PluginConfig)
	if !ok {
		return nil, nil, fmt.Errorf("the CRI plugin's config decoded to %T", decoded)
	}
	return config, cri, nil
}

// Decode is the runhcs branch of pkg/cri/server/helpers.go generateRuntimeOptions (and the
// same function in pkg/cri/sbserver), which is unexported: toml.TreeFromMap(r.Options), then
// Tree.Unmarshal into the type getRuntimeOptionsType picks for io.containerd.runhcs.v1,
// hcsshim's runhcs Options. Same go-toml (v1) as containerd, by go.mod.
func (Line) Decode(rt check.Runtime) (any, error) {
	if rt.Type != check.RunhcsV1 {
		return nil, fmt.Errorf("only %s is decoded here, not %q", check.RunhcsV1, rt.Type)
	}
	tree, err := toml.TreeFromMap(rt.Options)
	if err != nil {
		return nil, err
	}
	options := &runhcsoptions.Options{}
	if err := tree.Unmarshal(options); err != nil {
		return nil, err
	}
	return options, nil
}

// go-toml v1 reports the keys its strict mode did not use only in the error text:
// `undecoded keys: ["a" "b.c"]` (marshal.go, visitorState.validate).
var undecodedKeys = regexp.MustCompile(`^undecoded keys: \[(.*)\]$`)
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// Undecoded runs the same decoder in its strict mode (Decoder.Strict, which tracks the keys
// that Tree.Unmarshal visits) over the same tree, written out and read back.
func (Line) Undecoded(rt check.Runtime) ([]string, error) {
	tree, err := toml.TreeFromMap(rt.Options)
	if err != nil {
		return nil, err
	}
	text, err := tree.Marshal()
	if err != nil {
		return nil, err
	}
	err = toml.NewDecoder(bytes.NewReader(text)).Strict(true).Decode(&runhcsoptions.Options{})
	if err == nil {
		return nil, nil
	}
	m := undecodedKeys.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, err
	}
	var keys []string
	for _, q := range quoted.FindAllString(m[1], -1) {
		key, uerr := strconv.Unquote(q)
		if uerr != nil {
			return nil, fmt.Errorf("reading %q: %w", err, uerr)
		}
		keys = append(keys, key)
	}
	return keys, nil
}
