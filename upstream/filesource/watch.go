package filesource

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/xds-relay/xds-relay/shard"
)

// Watch timing. Variables so tests can shorten them.
var (
	// debounce is how long the directory must stay quiet before a reload:
	// an editor's or a deploy tool's burst of writes costs one reload.
	debounce = 100 * time.Millisecond
	// maxDelay bounds how long a stream of changes postpones the reload.
	maxDelay = time.Second
	// rewatchEvery paces attempts to watch the directory again after it was
	// removed or renamed (the watch dies with the directory).
	rewatchEvery = time.Second
)

// Run watches the directory and reloads it on change until ctx ends: a good
// load replaces the state of every attached class, a bad one is logged and
// the last good state stays. It also re-applies a type to a class whose
// interest in it changed (see Attach), so it must run for as long as the
// source serves. Call it once, in a goroutine of its own; it returns nil
// when ctx ends, after closing the watcher, and an error only if the watch
// cannot be set up at all.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("filesource: Run is already running")
	}
	defer s.running.Store(false)
	if s.fixed {
		return s.serveFixed(ctx)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("filesource: watch %s: %w", s.dir, err)
	}
	defer func() {
		_ = w.Close()
		s.setWatching(false)
	}()

	reload := stoppedTimer()
	rewatch := stoppedTimer()
	var pendingSince time.Time // first change not reloaded yet; zero when none
	schedule := func() {
		now := time.Now()
		if pendingSince.IsZero() {
			pendingSince = now
		}
		reload.Reset(min(debounce, max(0, pendingSince.Add(maxDelay).Sub(now))))
	}

	watching := s.watch(w)
	if watching {
		// Changes between New and the watch would otherwise go unseen.
		s.reload()
	} else {
		rewatch.Reset(rewatchEvery)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("filesource: watcher closed")
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			// Every change counts, dotfiles included: a ConfigMap volume
			// swaps its files by renaming its hidden ..data link.
			schedule()
			if watching && ev.Has(fsnotify.Remove|fsnotify.Rename) && len(w.WatchList()) == 0 {
				watching = false
				s.setWatching(false)
				s.log.Warn("config directory removed or renamed; serving the last good state until it is back", zap.String("dir", s.dir))
				rewatch.Reset(rewatchEvery)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("filesource: watcher closed")
			}
			// Typically an event queue overflow: changes may have been
			// missed, so reload to catch up.
			s.log.Warn("config directory watch error; reloading", zap.String("dir", s.dir), zap.Error(err))
			schedule()
		case <-rewatch.C:
			if watching = s.watch(w); watching {
				schedule()
			} else {
				rewatch.Reset(rewatchEvery)
			}
		case <-reload.C:
			pendingSince = time.Time{}
			s.reload()
		case <-s.wake.C():
			s.reapply()
		}
	}
}

// serveFixed is Run for files that never change: it only re-applies types
// to classes whose interest changed.
func (s *Source) serveFixed(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake.C():
			s.reapply()
		}
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// watch adds the directory to w and reports whether it is watched.
func (s *Source) watch(w *fsnotify.Watcher) bool {
	if err := w.Add(s.dir); err != nil {
		s.log.Debug("cannot watch config directory", zap.String("dir", s.dir), zap.Error(err))
		return false
	}
	s.setWatching(true)
	s.log.Info("watching config directory", zap.String("dir", s.dir))
	return true
}

func (s *Source) setWatching(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(func(st *Status) { st.Watching = on })
}

// reload loads the directory and installs the result, or keeps the last good
// state when the load fails, finds no resource (ErrNoResources) or would
// empty a type by removal (ErrTypesEmptied).
func (s *Source) reload() {
	snap, err := load(s.fsys, s.dir)
	if err == nil {
		err = snap.checkNotEmpty(s.dir)
	}
	if err == nil {
		err = s.checkKeepsTypes(snap)
	}
	now := time.Now()
	if err != nil {
		s.log.Error("config reload failed; keeping the last good state", zap.String("dir", s.dir), zap.Error(err))
		s.failed(err, now)
		return
	}
	s.install(snap, now)
	st := s.Status()
	s.log.Info("config reloaded", zap.String("dir", s.dir), zap.Strings("files", st.Files), zap.Any("resources", st.Resources))
}

// reapply installs the current state of the types a class asked for and was
// never given. A type the source never had is applied empty: the source is
// authoritative, so a client waiting for it learns it is empty.
func (s *Source) reapply() {
	s.pendMu.Lock()
	pending := s.pending
	s.pending = map[*shard.Class]map[string]struct{}{}
	s.pendMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.classes {
		types := pending[c]
		if len(types) == 0 {
			continue
		}
		for _, typeURL := range applyOrder(slices.Collect(maps.Keys(types))) {
			var resources []*shard.Resource
			if ts := s.state[typeURL]; ts != nil {
				resources = ts.resources
			}
			c.Apply(typeURL, resources, true)
			s.markApplied(c, typeURL, len(resources) > 0)
		}
	}
}
