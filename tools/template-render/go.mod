// Renders a containerd config template the way RKE2 (k3s) does at every start: Go's
// text/template, the user's template able to call {{ template "base" . }}. Standard
// library only; the template functions are this project's own (README.md).
module wcow.dev/tools/template-render

go 1.25.0
