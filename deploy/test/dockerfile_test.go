package deploytest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDockerfile checks deploy/Dockerfile as text.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	type instr struct {
		op, args string
		line     int
	}
	var stages [][]instr // instructions per FROM
	var cont strings.Builder
	startLine := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cont.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont.Len() == 0 {
			startLine = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cont.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cont.WriteString(trimmed)
		full := cont.String()
		cont.Reset()
		op, args, _ := strings.Cut(full, " ")
		in := instr{op: strings.ToUpper(op), args: strings.TrimSpace(args), line: startLine}
		if in.op == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			if in.op != "ARG" {
				t.Errorf("Dockerfile:%d: %s before the first FROM", in.line, in.op)
			}
			continue
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build (≥ 2 FROM)", len(stages))
	}

	// Build stage: the Go image matches go.mod; a static binary of ./cmd/xds-relay.
	build := stages[0]
	fromFields := strings.Fields(build[0].args)
	if len(fromFields) != 3 || !strings.EqualFold(fromFields[1], "AS") {
		t.Errorf("Dockerfile:%d: build stage %q is not named (FROM IMAGE AS NAME)", build[0].line, build[0].args)
	}
	stageName := fromFields[len(fromFields)-1]
	goImage := fromFields[0]
	goVersion, ok := strings.CutPrefix(goImage, "golang:")
	if !ok {
		t.Errorf("Dockerfile:%d: build stage image %q is not golang:", build[0].line, goImage)
	}
	checkGoVersion(t, goVersion)
	binary := ""
	for _, in := range build {
		if in.op == "RUN" && strings.Contains(in.args, "go build") {
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/xds-relay"} {
				if !strings.Contains(in.args, want) {
					t.Errorf("Dockerfile:%d: go build lacks %s", in.line, want)
				}
			}
			f := strings.Fields(in.args)
			if i := slices.Index(f, "-o"); i >= 0 && i+1 < len(f) {
				binary = f[i+1]
			}
		}
		if in.op == "COPY" && !strings.Contains(in.args, "--from") {
			checkCopySources(t, in.line, in.args)
		}
	}
	if binary == "" {
		t.Fatalf("Dockerfile: no `go build -o FILE` in the build stage")
	}

	// Final stage: distroless static (or scratch), non-root, the binary as entrypoint.
	final := stages[len(stages)-1]
	base := strings.Fields(final[0].args)[0]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("Dockerfile:%d: final stage %q, want distroless/static or scratch", final[0].line, base)
	}
	nonRoot := strings.HasSuffix(base, ":nonroot")
	var entrypoint []string
	installed := ""
	exposed := map[string]bool{}
	for _, in := range final {
		switch in.op {
		case "USER":
			u, _, _ := strings.Cut(in.args, ":")
			nonRoot = u == "nonroot" || u == "65532"
			if u == "root" || u == "0" {
				t.Errorf("Dockerfile:%d: USER %s", in.line, in.args)
			}
		case "ENTRYPOINT":
			if err := yaml.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Errorf("Dockerfile:%d: ENTRYPOINT %s is not the exec (JSON) form: %v", in.line, in.args, err)
			}
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) == 3 && f[0] == "--from="+stageName && f[1] == binary {
				installed = f[2]
			}
			if !strings.Contains(in.args, "--from") {
				checkCopySources(t, in.line, in.args)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				exposed[strings.TrimSuffix(p, "/tcp")] = true
			}
		}
	}
	if !nonRoot {
		t.Errorf("Dockerfile: final stage does not run as nonroot/65532")
	}
	if installed == "" {
		t.Errorf("Dockerfile: final stage does not COPY --from=%s %s", stageName, binary)
	}
	if len(entrypoint) != 1 || entrypoint[0] != installed {
		t.Errorf("Dockerfile: ENTRYPOINT %v, want [%q]", entrypoint, installed)
	}
	for _, p := range []string{"18000", "19000"} {
		if !exposed[p] {
			t.Errorf("Dockerfile: does not EXPOSE %s", p)
		}
	}
	// The chart's demo mode (no upstream) serves this directory.
	if !strings.Contains(string(data), "/etc/xds-relay/sample-config") {
		t.Errorf("Dockerfile: does not install deploy/sample-config at /etc/xds-relay/sample-config")
	}
}

// checkGoVersion: the build image's Go (golang:X.Y[.Z]) is at least go.mod's
// language version, or the build would fetch a toolchain (or fail offline).
func checkGoVersion(t *testing.T, tag string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var modGo string
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "go "); ok {
			modGo = strings.TrimSpace(v)
		}
	}
	parse := func(v string) []int {
		v, _, _ = strings.Cut(v, "-") // golang:1.26-bookworm
		var out []int
		for _, p := range strings.Split(v, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil
			}
			out = append(out, n)
		}
		return out
	}
	img, mod := parse(tag), parse(modGo)
	if len(img) < 2 || len(mod) < 2 {
		t.Errorf("cannot compare Go versions: image %q, go.mod %q", tag, modGo)
		return
	}
	// An image tag without a patch number is that minor's latest release.
	if img[0] != mod[0] || img[1] < mod[1] || (len(img) > 2 && img[1] == mod[1] && len(mod) > 2 && img[2] < mod[2]) {
		t.Errorf("Dockerfile builds with golang:%s, go.mod needs go %s", tag, modGo)
	}
}

// checkCopySources: every local COPY source exists under the build context
// (the repository root).
func checkCopySources(t *testing.T, line int, args string) {
	t.Helper()
	var f []string
	for _, a := range strings.Fields(args) {
		if !strings.HasPrefix(a, "--") {
			f = append(f, a)
		}
	}
	if len(f) < 2 {
		t.Errorf("Dockerfile:%d: COPY %s", line, args)
		return
	}
	for _, src := range f[:len(f)-1] {
		if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
			t.Errorf("Dockerfile:%d: COPY source %s is not in the build context (the repository root): %v", line, src, err)
		}
	}
}
