// Command xds-relay runs the xDS fan-out relay (xds-relay [flags]),
// validates its configuration file (xds-relay validate --config FILE), or
// prints its version (xds-relay version).
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// subcommands are the words run accepts as its first argument; anything
// else that is not a flag is a mistake, not a request to start the relay.
var subcommands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"validate": validate,
	"version":  version,
	"serve":    serve,
}

const usageHead = `usage: xds-relay [serve] [flags]       run the relay (default)
       xds-relay validate --config FILE  check a configuration file, report every error
       xds-relay version                 print the version and VCS revision
`

// run is the whole command: what the process would print goes to stdout
// (answers such as the version) and stderr (logs, errors, usage).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, ok := subcommands[args[0]]
		if !ok {
			fmt.Fprintf(stderr, "xds-relay: unknown command %q\n\n%s", args[0], usageHead)
			return 2
		}
		return cmd(args[1:], stdout, stderr)
	}
	return serve(args, stdout, stderr)
}

// noArgs reports stray positional arguments left after the flags: a typo
// such as a missing "--" must not be silently ignored.
func noArgs(name string, rest []string, stderr io.Writer) bool {
	if len(rest) == 0 {
		return true
	}
	fmt.Fprintf(stderr, "%s: unexpected argument %q\n\n%s", name, rest[0], usageHead)
	return false
}
