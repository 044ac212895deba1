// Pins cert-manager for its CRDs only (deploy/crds/ in the module): the chart's Issuer and
// Certificate are validated against them (tests/delivery) and the e2e suite installs them
// into the local control plane. Nothing here is built.
module wcow-runtime.dev/tools/cert-manager

go 1.24

require github.com/cert-manager/cert-manager v1.21.2
