package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// version prints the module version and the VCS revision the binary was
// built from, as recorded by the Go toolchain in the build info.
func version(args []string, stdout, stderr io.Writer) int {
	if !noArgs("xds-relay version", args, stderr) {
		return 2
	}
	fmt.Fprintln(stdout, versionLine())
	return 0
}

func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "xds-relay (no build info)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	rev, modified, when := "unknown", false, ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		case "vcs.time":
			when = s.Value
		}
	}
	line := fmt.Sprintf("xds-relay %s revision %s", v, rev)
	if modified {
		line += " (modified)"
	}
	if when != "" {
		line += " " + when
	}
	return line + " " + info.GoVersion
}
