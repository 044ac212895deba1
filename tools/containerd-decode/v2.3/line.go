// Package line is containerd 2.3's config loading (the release go.mod pins), with what the
// 2.x lines share (../v2x), for the checks in ../check.
package line

import (
	"context"
	"iter"
	"slices"

	srvconfig "github.com/containerd/containerd/v2/cmd/containerd/server/config"
	"github.com/containerd/containerd/v2/version"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"

	"wcow.dev/tools/containerd-decode/v2x"
)

// Line is containerd 2.3 (see go.mod for the exact release and the hcsshim it pins).
var Line = v2x.Line{Load: load}

// load does what `containerd config dump` and the daemon do on 2.3 (cmd/containerd/command
// config.go dumpConfig and main.go): srvconfig.LoadConfigWithPlugins over a default of the
// current config version, with every registered plugin, which migrates each file on its
// own to that version (plugin migrations included) before merging it, and refuses a
// drop-in whose version is higher than the root's (2.3.0-2.3.4).
func load(ctx context.Context, path string) (*srvconfig.Config, error) {
	config := &srvconfig.Config{Version: version.ConfigVersion}
	graph := registry.Graph(func(*plugin.Registration) bool { return false })
	plugins := func() iter.Seq[plugin.Registration] { return slices.Values(graph) }
	if err := srvconfig.LoadConfigWithPlugins(ctx, path, plugins, config); err != nil {
		return nil, err
	}
	return config, nil
}
