package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// validate checks a configuration file without starting anything.
func validate(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("xds-relay validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "configuration file to check")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\nflags of validate:\n", usageHead)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !noArgs("xds-relay validate", fs.Args(), stderr) {
		return 2
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "xds-relay validate: --config FILE is required")
		return 2
	}
	cfg, warnings, err := app.LoadConfigWithWarnings(*configPath)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %v\n", w)
	}
	if err == nil {
		err = cfg.CheckPaths()
		var ce *app.ConfigError
		if errors.As(err, &ce) {
			ce.File = *configPath
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "%s: ok\n", *configPath)
	return 0
}
