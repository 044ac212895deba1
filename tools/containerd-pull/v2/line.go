// Package line is containerd 2.x's image pull machinery, as the CRI plugin drives it on
// Windows, run over loopback against the test registry (see ../README.md).
package line

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	transferimage "github.com/containerd/containerd/v2/core/transfer/image"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/platforms"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"wcow.dev/tools/containerd-pull/check"
)

// Line is containerd 2.x.
type Line struct{}

// Paths: 2.0 pulls with the client only; 2.1+ through the transfer service unless a
// CRI option it lacks sends it back to the client (internal/cri/server/images/image_pull.go).
func (Line) Paths() []string { return []string{check.PathClient, check.PathTransfer} }

// Host is platforms.DefaultSpec() on a Windows amd64 host of the given build
// (defaults_windows.go: OSVersion is major.minor.build from RtlGetNtVersionNumbers).
func Host(build string) ocispec.Platform {
	return ocispec.Platform{OS: "windows", Architecture: "amd64", OSVersion: build}
}

// ClientMatcher is the matcher the CRI plugin's client pulls and reads images with on
// Windows. platforms.Default() there is Only(DefaultSpec()) in platforms v1.0.0-rc.1
// (containerd 2.0); from rc.2 (2.1+) it wraps the same NewMatcher in a comparer that ranks
// several matching entries by os.version, which exists only when built for Windows. Only
// has the same Match on every OS (NewMatcher matches os.version for a windows platform
// since rc.1), so the cases check the order among several matches for 2.0 only.
func ClientMatcher(build string) platforms.MatchComparer { return platforms.Only(Host(build)) }

// Pull resolves ref, fetches it into a content store in dir through path's handlers and
// selects the manifest with images.Manifest, as PullImage then does (image.Config()).
func (Line) Pull(ctx context.Context, dir, ref, build, path string) check.Outcome {
	var out check.Outcome
	// Labelled like containerd's metadata store: the image store's filter sets GC labels.
	store, err := local.NewLabeledStore(dir, labels{})
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
	var children images.HandlerFunc
	switch path {
	case check.PathClient:
		// client.go fetch(): FilterPlatforms, then LimitManifests(limit 1 for Pull).
		children = images.LimitManifests(images.FilterPlatforms(images.ChildrenHandler(store), matcher), matcher, 1)
	case check.PathTransfer:
		// core/transfer/local/pull.go: the image store's ImageFilter; the CRI plugin's store
		// is transferimage.NewStore(ref, WithPlatforms(DefaultSpec()), WithUnpack(...)).
		is := transferimage.NewStore(name, transferimage.WithPlatforms(Host(build)))
		children = is.ImageFilter(images.ChildrenHandler(store), store)
	default:
		out.Error = fmt.Sprintf("unknown path %q", path)
		return out
	}
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

// labels keeps content labels in memory for one pull.
type labels map[digest.Digest]map[string]string

func (l labels) Get(d digest.Digest) (map[string]string, error) { return l[d], nil }

func (l labels) Set(d digest.Digest, set map[string]string) error {
	l[d] = set
	return nil
}

func (l labels) Update(d digest.Digest, update map[string]string) (map[string]string, error) {
	current := l[d]
	if current == nil {
		current = map[string]string{}
	}
	for key, value := range update {
		if value == "" {
			delete(current, key)
		} else {
			current[key] = value
		}
	}
	l[d] = current
	return current, nil
}
