package filesource

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protopath"
	"google.golang.org/protobuf/reflect/protorange"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/xds-relay/xds-relay/dedup"
	"github.com/xds-relay/xds-relay/shard"
	"github.com/xds-relay/xds-relay/shard/wire"

	// The resource types files may hold (as resources or nested typed_config)
	// are those xdstype links in. Another type is a load error: protojson
	// cannot resolve it.
	"github.com/xds-relay/xds-relay/shard/xdstype"
)

// typePrefix is the prefix of the canonical type URL every resource is
// installed under, whatever prefix its "@type" used.
const typePrefix = xdstype.URLPrefix

// Status describes the source, for the admin endpoint.
type Status struct {
	Dir string `json:"dir"`
	// Watching is true while Run watches the directory.
	Watching bool `json:"watching"`
	// Files are the files of the current state, sorted.
	Files []string `json:"files"`
	// LoadedAt is when the current state was loaded.
	LoadedAt time.Time `json:"loaded_at"`
	// Loads and Failures count load attempts (New's included).
	Loads    uint64 `json:"loads"`
	Failures uint64 `json:"failures"`
	// LastError is the error of the latest load attempt, empty when it
	// succeeded: non-empty means the files on disk are not what is served.
	LastError string    `json:"last_error,omitempty"`
	FailedAt  time.Time `json:"failed_at,omitzero"`
	// Resources counts the current resources per type URL. A type whose
	// files were removed stays, with 0.
	Resources map[string]int `json:"resources"`
}

func (st *Status) clone() Status {
	out := *st
	out.Files = slices.Clone(st.Files)
	out.Resources = maps.Clone(st.Resources)
	return out
}

// Source serves the resources of a directory of files. Create it with New,
// hand Attach to shard.NewRegistryWith, and call Run once in a goroutine of its
// own to follow changes.
//
// Lock order: the registry's lock (Attach is called under it), Source.mu,
// Class.mu, then whatever shard watchers lock; pendMu is a leaf.
type Source struct {
	// Read-only after creation.
	dir   string // the directory, or a label such as "embedded sample" when fixed
	fsys  fs.FS  // the files: os.DirFS(dir), or an embedded file system
	fixed bool   // fsys never changes (embedded): Run watches nothing
	log   *zap.Logger
	wake  dedup.Signal // interest changes for Run to re-apply

	// Accessed atomically.
	running atomic.Bool            // Run was called
	status  atomic.Pointer[Status] // immutable once stored; stored under mu

	// Guarded by mu.
	mu      sync.Mutex
	state   map[string]*typeState // by type URL, every type ever loaded
	from    map[string][]string   // the served state's snapshot.from
	classes []*shard.Class
	closed  bool

	// Guarded by pendMu, a leaf lock: held for map updates only, never
	// while taking another lock (the class calls the hook with its own
	// lock held).
	pendMu  sync.Mutex
	pending map[*shard.Class]map[string]struct{} // class -> type URLs to apply
	applied map[*shard.Class]map[string]bool     // class -> type URLs it was given
}

// typeState is the complete current state of one type URL. Immutable.
type typeState struct {
	resources []*shard.Resource // sorted by name
	sum       uint64            // set hash of (name, hash) pairs
}

func newTypeState(typeURL string, resources []*shard.Resource) *typeState {
	slices.SortFunc(resources, func(a, b *shard.Resource) int { return strings.Compare(a.Name, b.Name) })
	var set dedup.SetSum
	for _, r := range resources {
		set.Add(r.Name, r.Hash)
	}
	return &typeState{resources: resources, sum: set.Sum(typeURL)}
}

// snapshot is one successful load of the directory.
type snapshot struct {
	files []string              // base names, sorted
	types map[string]*typeState // by type URL
	// from lists the files holding each type's resources, by type URL.
	from map[string][]string
	// empty holds the type URLs a file declares (type_url) with no
	// resources: meant to be empty (see checkKeepsTypes).
	empty map[string]bool
}

// New loads dir once. The error of a failed load names the file at fault
// (and the line, where the YAML or JSON parser gives one).
func New(dir string, log *zap.Logger) (*Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if dir == "" {
		return nil, errors.New("filesource: directory is empty")
	}
	dir = filepath.Clean(dir)
	return newSource(os.DirFS(dir), dir, false, log)
}

// NewFixed serves the files at the root of fsys, which never change (an
// embedded file system, such as the relay's built-in sample): Run follows no
// changes. name labels it in errors, logs and the status.
func NewFixed(fsys fs.FS, name string, log *zap.Logger) (*Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	return newSource(fsys, name, true, log)
}

func newSource(fsys fs.FS, dir string, fixed bool, log *zap.Logger) (*Source, error) {
	s := &Source{
		dir:     dir,
		fsys:    fsys,
		fixed:   fixed,
		log:     log,
		wake:    dedup.NewSignal(),
		state:   map[string]*typeState{},
		pending: map[*shard.Class]map[string]struct{}{},
		applied: map[*shard.Class]map[string]bool{},
	}
	s.status.Store(&Status{Dir: s.dir, Resources: map[string]int{}})
	snap, err := load(s.fsys, s.dir)
	if err == nil {
		err = snap.checkNotEmpty(s.dir)
	}
	if err != nil {
		return nil, err
	}
	s.install(snap, time.Now())
	return s, nil
}

// ErrNoResources is the error of a load that found no resource at all: an
// emptied directory, a deploy that has removed the old files and not yet
// written the new. Serving it would remove every resource from every client
// (Envoy drops its listeners and clusters), so the source refuses it: New
// fails, and a reload keeps the last good state until a load with resources.
var ErrNoResources = errors.New("no resources")

// checkNotEmpty returns an error wrapping ErrNoResources when snap holds no
// resource.
func (snap *snapshot) checkNotEmpty(dir string) error {
	for _, ts := range snap.types {
		if len(ts.resources) > 0 {
			return nil
		}
	}
	return fmt.Errorf("filesource: %s: %w in %d files: refusing a state that would remove every resource from every client", dir, ErrNoResources, len(snap.files))
}

// Attach installs the current state (every type, as complete state) into
// class and keeps the class up to date from then on. The returned hook, told
// when the class's interest in a type changes, makes Run apply a type the
// class was never given (as empty: the source is authoritative, so a client
// asking for it learns it has nothing). The source never reports what it
// requested (shard.Class.Requested), so the class keeps everything it was
// given and a type once given resources needs nothing more (a type given
// empty is given again: see markApplied). It never blocks.
func (s *Source) Attach(class *shard.Class) func(typeURL string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, typeURL := range applyOrder(slices.Collect(maps.Keys(s.state))) {
		class.Apply(typeURL, s.state[typeURL].resources, true)
		s.markApplied(class, typeURL, len(s.state[typeURL].resources) > 0)
	}
	if !s.closed && !slices.Contains(s.classes, class) {
		s.classes = append(s.classes, class)
	}
	return func(typeURL string) { s.interest(class, typeURL) }
}

// interest is a class's hook: called with the class's lock held, so it only
// records the type and wakes Run.
func (s *Source) interest(class *shard.Class, typeURL string) {
	s.pendMu.Lock()
	if s.applied[class][typeURL] {
		s.pendMu.Unlock()
		return
	}
	types := s.pending[class]
	if types == nil {
		types = map[string]struct{}{}
		s.pending[class] = types
	}
	types[typeURL] = struct{}{}
	s.pendMu.Unlock()
	s.wake.Notify()
}

// Detach forgets a dropped class: later reloads do not update it.
func (s *Source) Detach(class *shard.Class) {
	s.mu.Lock()
	s.classes = slices.DeleteFunc(s.classes, func(c *shard.Class) bool { return c == class })
	s.mu.Unlock()
	s.pendMu.Lock()
	delete(s.pending, class)
	delete(s.applied, class)
	s.pendMu.Unlock()
}

// Close forgets the attached classes: later reloads update no class. It is
// idempotent and does not stop Run (cancel its context for that).
func (s *Source) Close() error {
	s.mu.Lock()
	s.closed = true
	s.classes = nil
	s.mu.Unlock()
	s.pendMu.Lock()
	clear(s.pending)
	clear(s.applied)
	s.pendMu.Unlock()
	return nil
}

// markApplied records that class was given typeURL. A type given empty is
// not recorded: the class frees a table that holds nothing once no client
// subscribes to it, so its next client's interest must apply it again (and
// a type URL nobody has leaves nothing behind).
func (s *Source) markApplied(class *shard.Class, typeURL string, held bool) {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	if !held {
		delete(s.applied[class], typeURL)
		if len(s.applied[class]) == 0 {
			delete(s.applied, class)
		}
		return
	}
	if s.applied[class] == nil {
		s.applied[class] = map[string]bool{}
	}
	s.applied[class][typeURL] = true
}

// Status returns the source's state, for the admin endpoint.
func (s *Source) Status() Status { return s.status.Load().clone() }

// setStatus stores a modified copy of the status. Called with mu held.
func (s *Source) setStatus(f func(*Status)) {
	st := s.status.Load().clone()
	f(&st)
	s.status.Store(&st)
}

// install makes snap the current state and applies every type that changed
// (including types snap no longer has, now empty) to every attached class.
func (s *Source) install(snap *snapshot, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	typeURLs := slices.Collect(maps.Keys(s.state))
	for typeURL := range snap.types {
		if _, ok := s.state[typeURL]; !ok {
			typeURLs = append(typeURLs, typeURL)
		}
	}
	s.from = snap.from
	counts := make(map[string]int, len(typeURLs))
	for _, typeURL := range applyOrder(typeURLs) {
		next := snap.types[typeURL]
		if next == nil {
			next = newTypeState(typeURL, nil)
		}
		counts[typeURL] = len(next.resources)
		if old := s.state[typeURL]; old != nil && old.sum == next.sum {
			continue
		}
		s.state[typeURL] = next
		for _, c := range s.classes {
			c.Apply(typeURL, next.resources, true)
			s.markApplied(c, typeURL, len(next.resources) > 0)
		}
	}
	s.setStatus(func(st *Status) {
		st.Files = snap.files
		st.LoadedAt = at
		st.Loads++
		st.LastError = ""
		st.FailedAt = time.Time{}
		st.Resources = counts
	})
}

// failed records a load error; the current state stays.
func (s *Source) failed(err error, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStatus(func(st *Status) {
		st.Failures++
		st.LastError = err.Error()
		st.FailedAt = at
	})
}

// applyOrder sorts type URLs so that what a resource refers to is pushed
// before it: by xdstype.ApplyOrder (secrets, clusters, endpoints, listeners,
// routes, then the rest), then by name.
func applyOrder(typeURLs []string) []string {
	slices.SortFunc(typeURLs, func(a, b string) int {
		if ra, rb := xdstype.ApplyOrder(a), xdstype.ApplyOrder(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return typeURLs
}

// isConfigFile reports whether a directory entry is a file to load.
func isConfigFile(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// load reads every config file at the root of fsys (not recursively;
// symlinks are followed, so a Kubernetes ConfigMap volume works) into a
// snapshot; dir names fsys in errors.
func load(fsys fs.FS, dir string) (*snapshot, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("filesource: %s: %w", dir, err)
	}
	snap := &snapshot{files: []string{}, types: map[string]*typeState{}, from: map[string][]string{}, empty: map[string]bool{}}
	type origin struct{ file, where string }
	seen := map[string]map[string]origin{} // type URL -> name -> where defined
	byType := map[string][]*shard.Resource{}
	for _, e := range entries {
		if !isConfigFile(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		// A file removed between the listing and its reading is gone from
		// the directory, as it would be from a load a moment later.
		fi, err := fs.Stat(fsys, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("filesource: %w", err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := fs.ReadFile(fsys, e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("filesource: %w", err)
		}
		resources, lines, declared, err := parseFile(path, data)
		if err != nil {
			return nil, err
		}
		if declared != "" && len(resources) == 0 {
			snap.empty[declared] = true
		}
		for i, a := range resources {
			where := where(i, lines)
			typeURL, r, err := encode(a)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, where, err)
			}
			names := seen[typeURL]
			if names == nil {
				names = map[string]origin{}
				seen[typeURL] = names
			}
			if prev, dup := names[r.Name]; dup {
				return nil, fmt.Errorf("%s: %s: duplicate %s %q: already defined in %s at %s",
					path, where, shortType(typeURL), r.Name, prev.file, prev.where)
			}
			names[r.Name] = origin{path, where}
			byType[typeURL] = append(byType[typeURL], r)
			if from := snap.from[typeURL]; len(from) == 0 || from[len(from)-1] != e.Name() {
				snap.from[typeURL] = append(from, e.Name())
			}
		}
		snap.files = append(snap.files, e.Name())
	}
	for typeURL, list := range byType {
		snap.types[typeURL] = newTypeState(typeURL, list)
	}
	return snap, nil
}

// encode validates one resource and encodes it deterministically, under its
// canonical type URL.
func encode(a *anypb.Any) (typeURL string, r *shard.Resource, err error) {
	msg, err := a.UnmarshalNew()
	if err != nil {
		return "", nil, err
	}
	typeURL = typePrefix + string(msg.ProtoReflect().Descriptor().FullName())
	if err := validate(msg); err != nil {
		return "", nil, fmt.Errorf("invalid %s: %w", shortType(typeURL), err)
	}
	det := proto.MarshalOptions{Deterministic: true}
	value, err := det.Marshal(msg)
	if err != nil {
		return "", nil, err
	}
	name, err := wire.ResourceName(value)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", shortType(typeURL), err)
	}
	encoded, err := det.Marshal(&anypb.Any{TypeUrl: typeURL, Value: value})
	if err != nil {
		return "", nil, err
	}
	var children []string
	if t := xdstype.Lookup(typeURL); t != nil && t.Children != nil {
		children = t.Children(msg)
	}
	return typeURL, shard.NewResource(name, encoded, dedup.ResourceHash(encoded), nil, children, xdstype.References(msg)), nil
}

// typeName is the full message name of a type URL.
func typeName(typeURL string) string { return typeURL[strings.LastIndexByte(typeURL, '/')+1:] }

// where locates resources[i] of a file, with its line when known.
func where(i int, lines []int) string {
	if lines != nil {
		return fmt.Sprintf("resources[%d] (line %d)", i, lines[i])
	}
	return fmt.Sprintf("resources[%d]", i)
}

// validate checks msg and every message nested in it through a
// google.protobuf.Any (typed_config) against their protoc-gen-validate rules,
// as Envoy does before using them.
func validate(msg proto.Message) error {
	return protorange.Range(msg.ProtoReflect(), func(p protopath.Values) error {
		last := p.Index(-1)
		if p.Len() > 1 && last.Step.Kind() != protopath.AnyExpandStep {
			return nil
		}
		v, ok := last.Value.Message().Interface().(interface{ Validate() error })
		if !ok {
			return nil
		}
		if err := v.Validate(); err != nil {
			if p.Len() > 1 {
				return fmt.Errorf("%s: %w", strings.TrimPrefix(p.Path[1:].String(), "."), err)
			}
			return err
		}
		return nil
	})
}

// shortType is a type URL's message name without its package: "Cluster".
func shortType(typeURL string) string {
	if i := strings.LastIndexAny(typeURL, "/."); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}
