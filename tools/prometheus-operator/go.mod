// Pins the Prometheus Operator for its CRDs only (example/prometheus-operator-crd/ in the
// module): the chart's PrometheusRule and ServiceMonitors are validated against them
// (tests/delivery). Nothing here is built.
module wcow-runtime.dev/tools/prometheus-operator

go 1.24

require github.com/prometheus-operator/prometheus-operator v0.85.0
