// Command template-render renders a k3s-style containerd config template with Go's
// text/template, as RKE2 renders config.toml from config-v3.toml.tmpl at every start.
//
//	template-render -base BASE.tmpl [-user USER.tmpl] -data DATA.json -out OUT.toml
//
// BASE is k3s's built-in template (named "base"); USER, when given, is rendered instead and
// may call {{ template "base" . }}. DATA is the template data as JSON (field names as the
// template reads them: .NodeConfig.Containerd.Root ...). The functions the Windows base
// template calls are written here for this project (see README.md): they are not k3s's.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/template"
)

// funcs are the functions the base template calls, by their documented behaviour:
// deschemify turns a named-pipe URL into the pipe path, filepathjoin joins Windows path
// elements, toJson marshals a value.
var funcs = template.FuncMap{
	"deschemify": func(address string) string {
		return strings.TrimPrefix(strings.TrimPrefix(address, "npipe://"), "npipe:")
	},
	"filepathjoin": func(elements ...string) string {
		parts := make([]string, 0, len(elements))
		for _, element := range elements {
			if element = strings.Trim(element, `\/`); element != "" {
				parts = append(parts, element)
			}
		}
		return strings.Join(parts, `\`)
	},
	"toJson": func(value any) (string, error) {
		encoded, err := json.Marshal(value)
		return string(encoded), err
	},
}

func render(base, user string, data any) (string, error) {
	root := template.New("config").Funcs(funcs)
	if _, err := root.New("base").Parse(base); err != nil {
		return "", fmt.Errorf("base template: %w", err)
	}
	main := base
	if user != "" {
		main = user
	}
	if _, err := root.Parse(main); err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	var out bytes.Buffer
	if err := root.ExecuteTemplate(&out, "config", data); err != nil {
		return "", err
	}
	return out.String(), nil
}

func main() {
	basePath := flag.String("base", "", "the built-in template (named base)")
	userPath := flag.String("user", "", "the user's template (may call the base)")
	dataPath := flag.String("data", "", "the template data, as JSON")
	outPath := flag.String("out", "", "where to write the rendered config")
	flag.Parse()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "template-render:", err)
		os.Exit(1)
	}
	base, err := os.ReadFile(*basePath)
	if err != nil {
		fail(err)
	}
	var user []byte
	if *userPath != "" {
		if user, err = os.ReadFile(*userPath); err != nil {
			fail(err)
		}
	}
	raw, err := os.ReadFile(*dataPath)
	if err != nil {
		fail(err)
	}
	var data any
	if err := json.Unmarshal(raw, &data); err != nil {
		fail(err)
	}
	rendered, err := render(string(base), string(user), data)
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(*outPath, []byte(rendered), 0o644); err != nil {
		fail(err)
	}
}
