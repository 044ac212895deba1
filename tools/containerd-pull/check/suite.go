// Package check runs the pull cases of a fixture through one containerd line's manifest
// selection and compares what it fetched and selected with what the fixture expects.
package check

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// What the tests read; tests/integration/test_containerd_pull.py sets them.
const (
	// EnvFixture is a JSON file: the cases (a reference the test registry serves, the
	// host's build, and per pull path what containerd must fetch and select).
	EnvFixture = "WCOW_PULL_FIXTURE"
	// EnvResult, if set, is where the outcome of every case is written as JSON.
	EnvResult = "WCOW_PULL_RESULT"
)

// The two ways a CRI image pull reaches the registry.
const (
	// PathClient is containerd's client Pull (1.7, 2.0; 2.1+ with use_local_image_pull):
	// children filtered by the platform matcher and limited to the best one, then
	// images.Manifest with the same matcher.
	PathClient = "client"
	// PathTransfer is the transfer service (2.1+ by default): children filtered by the
	// image store's platforms (no limit), then images.Manifest with the client's matcher.
	PathTransfer = "transfer"
)

// Expect is what one pull path must do with one case.
type Expect struct {
	// Fetched: the digests of the image manifests fetched (sorted), an index not counted.
	Fetched []string `json:"fetched"`
	// SelectedConfig: the config digest of the manifest images.Manifest returns; nil means
	// not checked (the order among several matching entries is not this matcher's).
	SelectedConfig *string `json:"selected_config"`
	// Error: a part of the error the pull ends with; empty means it must succeed.
	Error string `json:"error"`
}

// Case is one reference pulled for one host build.
type Case struct {
	Name      string `json:"name"`
	Reference string `json:"reference"`
	Host      string `json:"host"` // 10.0.<build>, as platforms.DefaultSpec() gives it
	// Expect per path; null: not checked on this line (the order among several matching
	// entries on a line whose Windows matcher cannot be built on this OS).
	Expect map[string]*Expect `json:"expect"`
}

// Outcome is what a line's pull path did.
type Outcome struct {
	Fetched        []string `json:"fetched"`
	SelectedConfig string   `json:"selected_config"`
	Error          string   `json:"error"`
}

// Line is one containerd line's pull machinery.
type Line interface {
	// Paths are the pull paths this line has.
	Paths() []string
	// Pull fetches ref for a Windows amd64 host of build host into a content store in dir
	// through path, then selects the manifest as the CRI plugin does.
	Pull(ctx context.Context, dir, ref, host, path string) Outcome
}

// Run pulls every case of the fixture through every path of the line.
func Run(t *testing.T, line Line) {
	t.Helper()
	path := os.Getenv(EnvFixture)
	if path == "" {
		t.Skipf("%s is not set: no fixture to pull", EnvFixture)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fixture struct {
		Cases []Case `json:"cases"`
	}
	if err := json.Unmarshal(raw, &fixture); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(fixture.Cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	results := map[string]map[string]Outcome{}
	for _, c := range fixture.Cases {
		results[c.Name] = map[string]Outcome{}
		for _, p := range line.Paths() {
			expect, ok := c.Expect[p]
			if !ok {
				t.Errorf("%s: no expectation for the %s path", c.Name, p)
				continue
			}
			got := line.Pull(context.Background(), t.TempDir(), c.Reference, c.Host, p)
			sort.Strings(got.Fetched)
			results[c.Name][p] = got
			if expect == nil {
				t.Logf("%s (%s path): not checked on this line: %+v", c.Name, p, got)
				continue
			}
			for _, problem := range Compare(*expect, got) {
				t.Errorf("%s (%s on host %s, %s path): %s", c.Name, c.Reference, c.Host, p, problem)
			}
		}
	}
	if out := os.Getenv(EnvResult); out != "" {
		data, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Compare lists how an outcome differs from the expectation.
func Compare(expect Expect, got Outcome) []string {
	var problems []string
	want := slices.Clone(expect.Fetched)
	sort.Strings(want)
	if want == nil {
		want = []string{}
	}
	fetched := got.Fetched
	if fetched == nil {
		fetched = []string{}
	}
	if !slices.Equal(want, fetched) {
		problems = append(problems, fmt.Sprintf("fetched manifests %v, expected %v", fetched, want))
	}
	switch {
	case expect.Error == "" && got.Error != "":
		problems = append(problems, "failed: "+got.Error)
	case expect.Error != "" && !strings.Contains(got.Error, expect.Error):
		problems = append(problems, fmt.Sprintf("error %q, expected one containing %q", got.Error, expect.Error))
	}
	if expect.SelectedConfig != nil && *expect.SelectedConfig != got.SelectedConfig {
		problems = append(problems, fmt.Sprintf("selected the manifest of config %q, expected %q", got.SelectedConfig, *expect.SelectedConfig))
	}
	return problems
}

// IsImageManifest is true for the media types of one image's manifest (not an index).
func IsImageManifest(mediaType string) bool {
	return mediaType == "application/vnd.oci.image.manifest.v1+json" ||
		mediaType == "application/vnd.docker.distribution.manifest.v2+json"
}
