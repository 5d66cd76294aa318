package app

import (
	"fmt"
	"os"
)

// CheckPaths checks what the configuration names on this machine's file
// system, which Validate leaves alone (a configuration may be checked on
// another machine than the one it is for): the source directory exists.
// Errors are *ConfigError with Key set.
func (c *Config) CheckPaths() error {
	if c.Upstream.Address != "" || c.Source.Dir == "" {
		return nil
	}
	fi, err := os.Stat(c.Source.Dir)
	if err != nil {
		return &ConfigError{Key: "source.dir", Msg: fmt.Sprintf("%v", err)}
	}
	if !fi.IsDir() {
		return &ConfigError{Key: "source.dir", Msg: fmt.Sprintf("%s is not a directory", c.Source.Dir)}
	}
	return nil
}
