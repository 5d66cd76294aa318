package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
	"github.com/xds-relay/xds-relay/relay"
)

// serve runs the relay until SIGINT or SIGTERM, then drains it.
func serve(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("xds-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "configuration file (YAML); flags override it")
	listen := fs.String("listen", "", "downstream gRPC listen address (default :18000)")
	admin := fs.String("admin", "", "admin HTTP listen address (default 127.0.0.1:19000)")
	upstreamAddr := fs.String("upstream", "", "control plane HOST:PORT (plaintext); empty: serve from --source")
	upstreamProto := fs.String("upstream-protocol", "", "protocol spoken to the control plane: sotw or delta (default sotw)")
	sourceDir := fs.String("source", "", "directory of YAML/JSON resources to serve and watch when there is no upstream (default: the sample embedded in the binary)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "%s\nflags:\n", usageHead)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !noArgs("xds-relay", fs.Args(), stderr) {
		return 2
	}
	cfg := app.DefaultConfig()
	var warnings app.ConfigErrors
	if *configPath != "" {
		var err error
		if cfg, warnings, err = app.LoadConfigWithWarnings(*configPath); err != nil {
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
	log, level, err := newLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "xds-relay: %v\n", err)
		return 1
	}
	defer func() { _ = log.Sync() }()
	for _, w := range warnings {
		log.Warn("configuration: "+w.Msg, zap.String("file", w.File), zap.Int("line", w.Line), zap.String("key", w.Key))
	}

	r, err := app.Start(cfg, log, app.WithLogLevel(level))
	if err != nil {
		// An operator's mistake (port in use, missing directory): one line
		// that says what, no stack trace.
		fmt.Fprintf(stderr, "xds-relay: cannot start: %v\n", err)
		return 1
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	stopAfterSignals(runningRelay{r}, sig, max(cfg.Drain.Period, 0), log) // negative: no drain
	return 0
}

// relayToStop is what stopAfterSignals needs of a running relay.
type relayToStop interface {
	Shutdown(period time.Duration) relay.DrainReport
	Close()
	StreamCount() int
}

// runningRelay adapts *app.Relay to relayToStop.
type runningRelay struct{ *app.Relay }

func (r runningRelay) StreamCount() int { return r.Server().StreamCount() }

// stopAfterSignals waits for a signal, drains r over period, and stops it at
// once on a second signal. It says in the log when the drain starts, how long
// it may take, and how it ended: "complete" only when every stream was
// ended at its turn (or left), with the counts of the drain's report.
func stopAfterSignals(r relayToStop, sig <-chan os.Signal, period time.Duration, log *zap.Logger) {
	s := <-sig
	streams := r.StreamCount()
	if streams == 0 {
		log.Info("stopping: no client connected, nothing to drain", zap.String("signal", s.String()))
	} else {
		log.Info("stopping: draining clients to other relays; a second signal stops at once",
			zap.String("signal", s.String()), zap.Int("streams", streams), zap.Duration("drain_period", period))
	}
	start := time.Now()
	drained := make(chan relay.DrainReport, 1)
	go func() { drained <- r.Shutdown(period) }()
	var rep relay.DrainReport
	cutShort := false
	select {
	case rep = <-drained:
	case s := <-sig:
		log.Warn("second signal: stopping at once", zap.String("signal", s.String()), zap.Int("streams_left", r.StreamCount()))
		r.Close()
		rep, cutShort = <-drained, true
	}
	fields := []zap.Field{zap.Duration("after", time.Since(start).Round(time.Millisecond)),
		zap.Int("streams", rep.Streams), zap.Int("spread", rep.Spread), zap.Int("left", rep.Left),
		zap.Int("cut_early", rep.Cut), zap.Int("cut_at_end", rep.CutAtEnd),
		zap.Int("refused_streams", rep.Refused), zap.Int("refused_polls", rep.PollsRefused)}
	switch {
	case cutShort:
		log.Info("stopped", append([]zap.Field{zap.String("drain", "cut short")}, fields...)...)
	case rep.Complete():
		log.Info("stopped", append([]zap.Field{zap.String("drain", "complete")}, fields...)...)
	default:
		log.Warn("stopped", append([]zap.Field{zap.String("drain", "incomplete: streams were cut")}, fields...)...)
	}
}
