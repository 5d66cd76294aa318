package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeCommands are the shell lines of README.md's ```sh blocks, comments
// cut, in order.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	inSh := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			inSh = true
		case strings.HasPrefix(line, "```"):
			inSh = false
		case inSh:
			if i := strings.Index(line, "#"); i >= 0 {
				line = line[:i]
			}
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, line)
			}
		}
	}
	return out
}

// TestREADMECommands keeps the README honest: it has exactly the two set-up
// commands, and every `go run ./cmd/xds-relay ...` line it shows runs as
// written (addresses moved to free ports, relay.yaml a real file) against
// the binary started from an empty directory.
func TestREADMECommands(t *testing.T) {
	cmds := readmeCommands(t)
	if len(cmds) < 2 || cmds[0] != "go run ./cmd/xds-relay" || cmds[1] != "go test -race -count=1 ./..." {
		t.Fatalf("README's first two commands are %q; want the relay's main job and the tests", cmds[:min(2, len(cmds))])
	}
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil || !strings.Contains(string(ci), cmds[1]) {
		t.Errorf(".ci/run does not run the README's test command %q", cmds[1])
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "relay.yaml")
	if err := os.WriteFile(config, []byte("upstream:\n  address: 127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, line := range cmds {
		rest, ok := strings.CutPrefix(line, "go run ./cmd/xds-relay")
		if !ok {
			continue
		}
		ran++
		t.Run(line, func(t *testing.T) {
			args := strings.Fields(rest)
			listen, admin := freeAddr(t), freeAddr(t)
			for i, a := range args {
				switch {
				case a == "relay.yaml":
					args[i] = config
				case i > 0 && args[i-1] == "--listen":
					args[i] = listen
				case i > 0 && args[i-1] == "--admin":
					args[i] = admin
				case i > 0 && args[i-1] == "--upstream":
					args[i] = "127.0.0.1:1" // nothing listens: the relay starts and retries
				}
			}
			if len(args) > 0 && (args[0] == "validate" || args[0] == "version") {
				cmd := exec.Command(relayBinary(t), args...)
				cmd.Dir = dir
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				return
			}
			if !strings.Contains(rest, "--admin") {
				args = append(args, "--admin", admin)
			}
			if !strings.Contains(rest, "--listen") {
				args = append(args, "--listen", listen)
			}
			startBinary(t, t.TempDir(), args...)
			waitHTTP(t, "http://"+admin+"/healthz")
		})
	}
	if ran < 4 {
		t.Errorf("ran %d `go run ./cmd/xds-relay` lines from the README, want at least 4", ran)
	}
}

// adminPathRE finds the admin paths the README names in backquotes.
var adminPathRE = regexp.MustCompile("`(/[a-z/]*)`")

// TestREADMEAdminPaths requests every admin path README.md names from the
// relay started on its embedded default.
func TestREADMEAdminPaths(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, operating, _ := strings.Cut(string(readme), "## Operating it")
	operating, _, _ = strings.Cut(operating, "\n## ")
	paths := adminPathRE.FindAllStringSubmatch(operating, -1)
	if len(paths) < 5 {
		t.Fatalf("found %d admin paths in README's Operating it section, want at least 5", len(paths))
	}
	admin := freeAddr(t)
	startBinary(t, t.TempDir(), "--listen", freeAddr(t), "--admin", admin)
	waitHTTP(t, "http://"+admin+"/readyz")
	for _, m := range paths {
		if code, body := httpGet(t, "http://"+admin+m[1]); code != http.StatusOK {
			t.Errorf("GET %s (named in README): %d %s", m[1], code, body)
		}
	}
}
