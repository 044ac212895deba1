// The checks shared by the containerd lines in ../v1.7 and ../v2 (standard library only).
module wcow.dev/tools/containerd-pull/check

go 1.25.0
