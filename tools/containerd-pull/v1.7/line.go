// Package line is containerd 1.7's image pull machinery, as the CRI plugin drives it on
// Windows, run over loopback against the test registry (see ../README.md).
package line

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/content/local"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/remotes"
	"github.com/containerd/containerd/remotes/docker"
	"github.com/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"wcow.dev/tools/containerd-pull/check"
)

// Line is containerd 1.7.
type Line struct{}

// Paths: 1.7's CRI plugin pulls with the client (pkg/cri/server/image_pull.go).
func (Line) Paths() []string { return []string{check.PathClient} }

// Host is platforms.DefaultSpec() on a Windows amd64 host of the given build.
func Host(build string) ocispec.Platform {
	return ocispec.Platform{OS: "windows", Architecture: "amd64", OSVersion: build}
}

// ClientMatcher is platforms.Default() on Windows: Only(DefaultSpec()) (the CRI plugin's
// client is made WithDefaultPlatform(platforms.Default()), pkg/cri/cri.go). 1.7 requires
// containerd/platforms v0.2.1, whose os.version matching exists only when built for
// Windows (defaults_windows.go, platforms_windows.go); this module selects v1.0.0-rc.1,
// where NewMatcher applies the same rule on every OS (see ../README.md).
func ClientMatcher(build string) platforms.MatchComparer { return platforms.Only(Host(build)) }

// Pull resolves ref, fetches it into a content store in dir as client.Pull does
// (client.go fetch: FilterPlatforms, LimitManifests(1)) and selects the manifest with
// images.Manifest, as PullImage then does (image.Config()).
func (Line) Pull(ctx context.Context, dir, ref, build, path string) check.Outcome {
	var out check.Outcome
	if path != check.PathClient {
		out.Error = fmt.Sprintf("unknown path %q", path)
		return out
	}
	store, err := local.NewStore(dir)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	resolver := docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts)),
	})
	name, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	matcher := ClientMatcher(build)
	children := images.LimitManifests(images.FilterPlatforms(images.ChildrenHandler(store), matcher), matcher, 1)
	record := images.HandlerFunc(func(_ context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if check.IsImageManifest(d.MediaType) {
			out.Fetched = append(out.Fetched, d.Digest.String())
		}
		return nil, nil
	})
	handler := images.Handlers(remotes.FetchHandler(store, fetcher), record, children)
	if err := images.Dispatch(ctx, handler, nil, desc); err != nil {
		out.Error = err.Error()
		return out
	}
	manifest, err := images.Manifest(ctx, store, desc, matcher)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.SelectedConfig = manifest.Config.Digest.String()
	return out
}
