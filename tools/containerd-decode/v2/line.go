// Package line is containerd 2.2's config loading (the release go.mod pins), with what the
// 2.x lines share (../v2x), for the checks in ../check.
package line

import (
	"context"
	"fmt"

	srvconfig "github.com/containerd/containerd/v2/cmd/containerd/server/config"
	"github.com/containerd/containerd/v2/version"
	"github.com/containerd/plugin/registry"

	"wcow.dev/tools/containerd-decode/v2x"
)

// Line is containerd 2.2 (see go.mod for the exact release and the hcsshim it pins).
var Line = v2x.Line{Load: load}

// load does what `containerd config dump` does on 2.0-2.2 (cmd/containerd/command/config.go
// dumpConfig, unexported): srvconfig.LoadConfig over a default of the current config
// version (which migrates only a version-1 file, and only its plugin names), then each
// registered plugin's ConfigMigration when the merged config is older. The daemon does the
// same in server.New.
func load(ctx context.Context, path string) (*srvconfig.Config, error) {
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
	return config, nil
}
