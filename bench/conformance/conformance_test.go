package conformance

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	flagSchedules = flag.Int("conformance.schedules", 10, "schedules per cell")
	flagSeed      = flag.Uint64("conformance.seed", 1, "seed of each cell's first schedule (the i-th uses seed+i)")
	flagSteps     = flag.Int("conformance.steps", 40, "events per schedule (besides quiet points)")
	flagCell      = flag.String("conformance.cell", "", "run only the cells whose name contains this")
	flagAll       = flag.Bool("conformance.all", false, "generate the features cells exclude by default too")
	flagShrink    = flag.Duration("conformance.shrink", 90*time.Second, "time spent shrinking a divergence (0: none)")
	flagRecord    = flag.String("conformance.record", "", "directory to write shrunk diverging schedules to")
	flagResync    = flag.Duration("conformance.resync", 0, "the relays' upstream.resync_interval (0: the default); short, class streams are replaced throughout a schedule")
	flagStop      = flag.Bool("conformance.stop", true, "stop a cell at its first divergence")
	flagOpen      = flag.Bool("conformance.open", false, "TestReplay: fail on testdata schedules marked open too")
	flagExclude   = flag.String("conformance.exclude", "", "comma-separated features to exclude, instead of each cell's defaults (\"none\": exclude nothing)")
	flagHold      = flag.Duration("conformance.hold", 0, "how long the final quiet point watches the clients (0: shard.PendingGrace + 500ms; negative: no hold, for bulk runs)")
	flagVerbose   = flag.Bool("conformance.log", false, "log the relays at warn level")
	flagParallel  = flag.Int("conformance.parallel", 1, "schedules of a cell run at once, each with its own control plane, relays and clients")
)

func runOptions(t *testing.T) RunOptions {
	o := RunOptions{Hold: *flagHold, Resync: *flagResync}
	if *flagVerbose {
		l, _ := zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))
		o.Log = l
	}
	return o
}

// TestConformance runs -conformance.schedules seeded schedules in every
// cell of the matrix (the cells at once; each cell's schedules one after
// the other) and fails with the seed and a shrunk schedule at a divergence.
func TestConformance(t *testing.T) {
	// The cells run at once whatever -test.parallel says: they mostly wait
	// on the network (t.Run may be called from several goroutines).
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, cell := range Cells() {
		if *flagCell != "" && !strings.Contains(cell.Name, *flagCell) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done() // here: t.Run skips the function when -run filters the cell out
			t.Run(cell.Name, func(t *testing.T) { runCell(t, cell) })
		}()
	}
}

func runCell(t *testing.T, cell Cell) {
	o := runOptions(t)
	gen := genOptions(cell, *flagSteps, *flagAll, excludeFlag())
	// Schedules run -conformance.parallel at a time: each has its own
	// control plane, relays and clients, so their final holds (most of a
	// schedule's time, spent waiting) overlap. The seeds are handed out in
	// order; with -conformance.stop no new one starts after a divergence.
	var (
		mu       sync.Mutex // guards diverged, stopped and t's failure output order
		diverged int
		stopped  bool
		wg       sync.WaitGroup
	)
	seeds := make(chan uint64)
	for range max(1, *flagParallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range seeds {
				if runSchedule(t, cell, seed, gen, o, &mu) {
					mu.Lock()
					diverged++
					stopped = stopped || *flagStop
					mu.Unlock()
				}
			}
		}()
	}
	for i := range *flagSchedules {
		mu.Lock()
		stop := stopped
		mu.Unlock()
		if stop {
			break
		}
		seeds <- *flagSeed + uint64(i)
	}
	close(seeds)
	wg.Wait()
	t.Logf("cell %s: %d schedules from seed %d, %d diverged", cell.Name, *flagSchedules, *flagSeed, diverged)
}

// runSchedule runs the schedule of seed in cell and reports whether it
// diverged (reported on t, with its shrunk form). mu orders the reports of
// schedules running at once.
func runSchedule(t *testing.T, cell Cell, seed uint64, gen GenOptions, o RunOptions, mu *sync.Mutex) bool {
	s := Generate(cell.Name, seed, gen)
	err := Run(cell, s, o)
	if err == nil {
		return false
	}
	var d *Divergence
	if !errors.As(err, &d) {
		t.Errorf("seed %d: run failed: %v", seed, err)
		return true
	}
	var small Schedule
	var serr error
	if *flagShrink > 0 {
		small = Shrink(cell, s, d, o, *flagShrink, t.Logf)
		serr = Run(cell, small, o)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Errorf("cell %s seed %d diverged (replay: go test ./bench/conformance/ -run 'TestConformance/%s$' -conformance.seed %d -conformance.schedules 1%s):\n%v\n%s",
		cell.Name, seed, cell.Name, seed, featureFlags(), err, s)
	if *flagShrink > 0 {
		t.Errorf("shrunk to %d steps (replays: %v):\n%v\n%s", len(small.Steps), IsDivergence(serr), serr, small.JSON())
		if *flagRecord != "" {
			path := filepath.Join(*flagRecord, strings.ReplaceAll(cell.Name, "/", "-")+"-seed"+strconv.FormatUint(seed, 10)+".json")
			if err := os.WriteFile(path, small.JSON(), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	return true
}

// excludeFlag parses -conformance.exclude (nil: the cells' defaults).
func excludeFlag() []Feature {
	if *flagExclude == "" {
		return nil
	}
	out := []Feature{}
	for _, f := range strings.Split(*flagExclude, ",") {
		if f != "none" {
			out = append(out, Feature(f))
		}
	}
	return out
}

func featureFlags() string {
	if *flagExclude != "" {
		return " -conformance.exclude " + *flagExclude
	}
	if *flagAll {
		return " -conformance.all"
	}
	return ""
}

// TestReplay replays every schedule under testdata in its cell. One marked
// open (a known divergence not fixed yet) is reported, not failed, unless
// -conformance.open; every other one must conform.
func TestReplay(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, f := range files {
		s, err := LoadSchedule(f)
		if err != nil {
			t.Fatal(err)
		}
		cell, ok := CellByName(s.Cell)
		if !ok {
			t.Fatalf("%s: unknown cell %q", f, s.Cell)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(filepath.Base(f), func(t *testing.T) {
				err := Run(cell, s, runOptions(t))
				switch {
				case err == nil && s.Open != "":
					t.Logf("conforms now (open: %s): remove the open mark", s.Open)
				case err == nil:
				case !IsDivergence(err):
					t.Fatalf("run failed: %v", err)
				case s.Open != "" && !*flagOpen:
					t.Skipf("known divergence (%s): %v", s.Open, err)
				default:
					t.Fatalf("%s\n%v", s, err)
				}
			})
		}()
	}
}
