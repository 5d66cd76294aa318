// Command xds-relay runs the xDS fan-out relay, or validates its
// configuration file (xds-relay validate --config FILE).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "validate" {
		return validate(args[1:], stderr)
	}
	fs := flag.NewFlagSet("xds-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "configuration file (YAML); flags override it")
	listen := fs.String("listen", "", "downstream gRPC listen address (default :18000)")
	admin := fs.String("admin", "", "admin HTTP listen address (default 127.0.0.1:19000)")
	upstreamAddr := fs.String("upstream", "", "control plane HOST:PORT (plaintext); empty: serve from --source")
	upstreamProto := fs.String("upstream-protocol", "", "protocol spoken to the control plane: sotw or delta (default sotw)")
	sourceDir := fs.String("source", "", "directory of YAML/JSON resources served when there is no upstream (default deploy/sample-config)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: xds-relay [flags]\n       xds-relay validate --config FILE\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg := app.DefaultConfig()
	if *configPath != "" {
		var err error
		if cfg, err = app.LoadConfig(*configPath); err != nil {
			fmt.Fprintf(stderr, "xds-relay: %v\n", err)
			return 1
		}
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen":
			cfg.Listen = *listen
		case "admin":
			cfg.Admin = *admin
		case "upstream":
			cfg.Upstream.Address = *upstreamAddr
		case "upstream-protocol":
			cfg.Upstream.Protocol = *upstreamProto
		case "source":
			cfg.Source.Dir = *sourceDir
		}
	})
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "xds-relay: invalid flags or configuration: %v\n", err)
		return 1
	}
	log, level, err := newLogger(cfg.Log)
	if err != nil {
		fmt.Fprintf(stderr, "xds-relay: %v\n", err)
		return 1
	}
	defer func() { _ = log.Sync() }()

	r, err := app.Start(cfg, log, app.WithLogLevel(level))
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s := <-sig
	log.Info("stopping: draining clients to other relays (a second signal stops at once)",
		zap.String("signal", s.String()), zap.Duration("drain_period", cfg.Drain.Period))
	drained := make(chan struct{})
	go func() {
		r.Shutdown(cfg.Drain.Period)
		close(drained)
	}()
	select {
	case <-drained:
	case s := <-sig:
		log.Warn("stopping at once", zap.String("signal", s.String()))
		r.Close()
		<-drained
	}
	return 0
}

func validate(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("xds-relay validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "configuration file to check")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "xds-relay validate: --config FILE is required")
		return 2
	}
	if _, err := app.LoadConfig(*configPath); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "%s: ok\n", *configPath)
	return 0
}

func newLogger(c app.LogConfig) (*zap.Logger, zap.AtomicLevel, error) {
	var zc zap.Config
	if c.Format == "json" {
		zc = zap.NewProductionConfig()
	} else {
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
	}
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, zap.AtomicLevel{}, fmt.Errorf("log.level: %w", err)
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	log, err := zc.Build()
	return log, zc.Level, err
}
