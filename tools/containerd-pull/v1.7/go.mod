// containerd 1.7's own image pull selection (remotes/docker, images), for
// tests/integration/test_containerd_pull.py. See ../README.md.
module wcow.dev/tools/containerd-pull/v1.7

go 1.25.0

require (
	github.com/containerd/containerd v1.7.35
	// Above the v0.2.1 containerd 1.7 requires: v0.2.1 matches os.version only when built
	// for Windows; v1.0.0-rc.1 applies the same rule on Linux (see ../README.md).
	github.com/containerd/platforms v1.0.0-rc.1
	github.com/opencontainers/image-spec v1.1.0
	wcow.dev/tools/containerd-pull/check v0.0.0
)

require (
	github.com/AdaLogics/go-fuzz-headers v0.0.0-20230811130428-ced1acdcaa24 // indirect
	github.com/containerd/errdefs v0.3.0 // indirect
	github.com/containerd/log v0.1.0 // indirect
	github.com/felixge/httpsnoop v1.0.3 // indirect
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/klauspost/compress v1.16.7 // indirect
	github.com/moby/locker v1.0.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp v0.45.0 // indirect
	go.opentelemetry.io/otel v1.21.0 // indirect
	go.opentelemetry.io/otel/metric v1.21.0 // indirect
	go.opentelemetry.io/otel/trace v1.21.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20240401170217-c3f982113cda // indirect
	google.golang.org/grpc v1.59.0 // indirect
	google.golang.org/protobuf v1.35.2 // indirect
)

replace wcow.dev/tools/containerd-pull/check => ../check
