// Command docnames checks that the code names docs/*.md and README.md cite
// exist: every `path/file.go` (or a testdata schedule, or a directory of the
// tree) is a tracked file or directory, and every `pkg.Name`, `Type.member`
// or CamelCase `Name` in backquotes is declared in the module's Go code
// (test files included) or is an alert of the rule file (alertsFile). Names of other projects (xDS messages, grpc-go,
// the standard library) are skipped when their first part is no package or
// type of this module, or allowed by the list below.
//
//	go run .ci/docnames/main.go [FILE.md ...]
//
// A name it reports is either drift (fix the doc) or a name of another
// project (add it to external).
package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// external are CamelCase names the docs cite that are not this module's:
// xDS and protobuf messages and fields, gRPC and Go runtime names.
var external = set(
	"Listener", "Cluster", "RouteConfiguration", "ClusterLoadAssignment", "ScopedRouteConfiguration",
	"VirtualHost", "Secret", "Runtime", "DiscoveryRequest", "DiscoveryResponse", "DeltaDiscoveryRequest",
	"DeltaDiscoveryResponse", "Any", "Node", "Resource", "HttpConnectionManager", "HttpConnectionManagers",
	"StreamAggregatedResources", "DeltaAggregatedResources", "ClusterDiscoveryService", "StreamClusters",
	"DeltaClusters", "AggregatedDiscoveryService", "LinearCache", "SetReturnedResources", "Subscription",
	"HeapAlloc", "HeapIdle", "HeapInuse", "NextGC", "MaxRSS", "Sys", "GOMEMLIMIT", "GOGC", "GracefulStop",
	"SendMsg", "RecvMsg", "Recv", "Send", "Serve", "Shutdown", "Stop", "Close", "Materialize",
	"BufferSlice", "SliceBuffer", "WaitGroup", "ServerTransportStreamFromContext", "AddCleanup", "AfterFunc",
	"Peek", "Discard", "UpdateResource", "ResourceType", "TypeURL", "AllResourcesRequiredInSotW", "Decoder",
	"OTLP", "SETTINGS_MAX_CONCURRENT_STREAMS", "JSON", "YAML", "TLS", "HTTP", "GOAWAY", "SotW", "RSS",
	"CPU", "ACK", "NACK", "SIGTERM", "SIGKILL", "HPA", "PDB", "LDS", "RDS", "CDS", "EDS", "SDS", "RTDS",
	"SRDS", "VHDS", "ECDS", "ADS", "REST", "KiB", "MiB", "GiB", "IPv4", "IPv6", "ClusterIP", "ConfigMap",
	"Deployment", "Service", "Namespace", "DaemonSet", "StatefulSet", "RuntimeDefault", "IfNotPresent",
	"CONTINUATION", "replicaCount", "terminationGracePeriodSeconds", "nodeSelector", "topologySpreadConstraints",
	"minReplicas", "searchNamespace", "folderAnnotation",
	// grpc-go test names cited as peers.
	"RouteResourceUpdate", "RouteResourceChangeToInline", "CircuitBreaking", "DropByCategory", "LRSLogicalDNS",
	"UpdateLRSServerToNil", "ConfigUpdateWithSameLoadReportingServerConfig", "LoadStatsResponse",
	// Dotted names of other projects whose first part is also one of ours.
	"Resource.aliases", "Resource.ttl", "Subscription.SetReturnedResources", "adminToken.create",
	"adminToken.existingSecret", "source.last_error",
	// An old name of a configuration key, still accepted.
	"upstream.addresses",
)

var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	camelRE = regexp.MustCompile(`^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$|^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$`)
	fileRE  = regexp.MustCompile(`\.(ya?ml|md|json|sh|html|svg|txt|pb\.gz)$`)
	spanRE  = regexp.MustCompile("`([^`]+)`")
	lineRE  = regexp.MustCompile(`:\d+(-\d+)?$`)
)

func set(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

type index struct {
	files    map[string]bool            // tracked paths
	dirs     map[string]bool            // their directories
	pkgs     map[string]map[string]bool // package name -> top-level names
	types    map[string]map[string]bool // type name -> fields and methods
	embeds   map[string][]string        // type name -> embedded type names
	declared map[string]bool            // every top-level and member name
	config   map[string]bool            // configuration keys (docs/configuration.md)
	mutexes  []string                   // Type.field of every sync.Mutex or RWMutex field of the relay
	core     map[string]map[string]bool // the relay's own types (not bench/): name -> members
	goFiles  []string                   // every tracked Go file
	curCore  bool                       // the file being added is the relay's own
}

func main() {
	ix := load()
	docs := os.Args[1:]
	if len(docs) == 0 {
		docs, _ = filepath.Glob("docs/*.md")
		docs = append(docs, "README.md")
	}
	bad := 0
	for _, doc := range docs {
		bad += ix.check(doc)
	}
	bad += ix.checkLocks("docs/architecture.md")
	bad += checkSections(docs, ix.goFiles)
	if len(ix.mutexes) < 10 {
		fmt.Printf("found only %d mutexes in the code: the check is broken\n", len(ix.mutexes))
		bad++
	}
	if bad > 0 {
		fmt.Printf("%d citations name nothing that exists: fix the doc or the comment, or list another project's name in .ci/docnames/main.go\n", bad)
		os.Exit(1)
	}
}

func load() *index {
	ix := &index{files: map[string]bool{}, dirs: map[string]bool{}, pkgs: map[string]map[string]bool{},
		types: map[string]map[string]bool{}, core: map[string]map[string]bool{}, embeds: map[string][]string{}, declared: map[string]bool{}, config: map[string]bool{}}
	out, err := exec.Command("git", "ls-files").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "git ls-files:", err)
		os.Exit(2)
	}
	fset := token.NewFileSet()
	for _, f := range strings.Fields(string(out)) {
		ix.files[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			ix.dirs[d] = true
		}
		if !strings.HasSuffix(f, ".go") {
			continue
		}
		ix.goFiles = append(ix.goFiles, f)
		if _, err := os.Stat(f); err != nil {
			continue // deleted in the work tree
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		outside := strings.HasPrefix(f, "bench/") || strings.HasPrefix(f, "deploy/") || strings.HasPrefix(f, ".ci/")
		ix.curCore = !outside
		ix.addFile(af, !outside && !strings.HasSuffix(f, "_test.go"))
	}
	ix.loadConfig()
	ix.loadAlerts()
	return ix
}

// alertsFile holds the relay's Prometheus alerts, whose names the docs cite.
const alertsFile = "deploy/helm/xds-relay/files/xds-relay.rules.yaml"

var alertRE = regexp.MustCompile(`^\s*- alert: ([A-Za-z0-9_]+)\s*$`)

// loadAlerts declares the alert names of alertsFile.
func (ix *index) loadAlerts() {
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if m := alertRE.FindStringSubmatch(line); m != nil {
			ix.declared[m[1]] = true
			n++
		}
	}
	if n == 0 {
		fmt.Fprintf(os.Stderr, "%s: no alert found\n", alertsFile)
		os.Exit(2)
	}
}

func (ix *index) member(typ, name string) {
	if ix.types[typ] == nil {
		ix.types[typ] = map[string]bool{}
	}
	ix.types[typ][name] = true
	if ix.curCore {
		if ix.core[typ] == nil {
			ix.core[typ] = map[string]bool{}
		}
		ix.core[typ][name] = true
	}
	ix.declared[name] = true
}

func (ix *index) addFile(af *ast.File, relay bool) {
	pkg := af.Name.Name
	if ix.pkgs[pkg] == nil {
		ix.pkgs[pkg] = map[string]bool{}
	}
	top := func(name string) {
		ix.pkgs[pkg][name] = true
		ix.declared[name] = true
	}
	for _, d := range af.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				top(d.Name.Name)
				continue
			}
			ix.member(recvName(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					top(s.Name.Name)
					if ix.types[s.Name.Name] == nil {
						ix.types[s.Name.Name] = map[string]bool{}
					}
					if ix.curCore && ix.core[s.Name.Name] == nil {
						ix.core[s.Name.Name] = map[string]bool{}
					}
					ix.addMembers(s.Name.Name, s.Type, relay)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						top(n.Name)
					}
				}
			}
		}
	}
}

func (ix *index) addMembers(typ string, t ast.Expr, relay bool) {
	switch t := t.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if sel, ok := f.Type.(*ast.SelectorExpr); ok && relay && (sel.Sel.Name == "Mutex" || sel.Sel.Name == "RWMutex") {
				for _, n := range f.Names {
					ix.mutexes = append(ix.mutexes, typ+"."+n.Name)
				}
			}
			if len(f.Names) == 0 {
				e := recvName(f.Type)
				ix.member(typ, e)
				ix.embeds[typ] = append(ix.embeds[typ], e)
			}
			for _, n := range f.Names {
				ix.member(typ, n.Name)
			}
		}
	case *ast.InterfaceType:
		for _, f := range t.Methods.List {
			for _, n := range f.Names {
				ix.member(typ, n.Name)
			}
		}
	}
}

// recvName is the type name of a receiver or embedded field: *T, T[P], pkg.T.
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// loadConfig reads the configuration keys from docs/configuration.md's
// tables (the first cell's backquoted spans).
func (ix *index) loadConfig() {
	f, err := os.Open("docs/configuration.md")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range spanRE.FindAllStringSubmatch(cells[1], -1) {
			ix.config[m[1]] = true
		}
	}
}

// isConfig reports whether s is a configuration key or a group of them.
func (ix *index) isConfig(s string) bool {
	if ix.config[s] {
		return true
	}
	for k := range ix.config {
		if strings.HasPrefix(k, s+".") {
			return true
		}
	}
	return false
}

// rowMember is hasMember for a struct table, which describes the relay's
// own types: a type of that name in bench/ lends none of its members.
func (ix *index) rowMember(typ, name string, depth int) bool {
	members, ok := ix.core[typ]
	if !ok {
		return ix.hasMember(typ, name, depth)
	}
	if members[name] {
		return true
	}
	if depth > 3 {
		return false
	}
	for _, e := range ix.embeds[typ] {
		if ix.rowMember(e, name, depth+1) {
			return true
		}
	}
	return false
}

// declaredTop reports whether name is a top-level declaration of some
// package of the module.
func (ix *index) declaredTop(name string) bool {
	for _, decls := range ix.pkgs {
		if decls[name] {
			return true
		}
	}
	return false
}

func (ix *index) hasMember(typ, name string, depth int) bool {
	if ix.types[typ][name] {
		return true
	}
	if depth > 3 {
		return false
	}
	for _, e := range ix.embeds[typ] {
		if ix.hasMember(e, name, depth+1) {
			return true
		}
	}
	return false
}

var topDirs = set("relay", "shard", "upstream", "bench", "cmd", "deploy", "dedup", "docs", ".ci")

// checkPath reports whether a path-like span names a tracked file or
// directory; ok is false when the span is no path of the tree.
func (ix *index) checkPath(s string) (isPath, ok bool) {
	s = lineRE.ReplaceAllString(s, "")
	s = strings.TrimSuffix(s, "/")
	first, _, hasSlash := strings.Cut(s, "/")
	ext := path.Ext(s)
	switch {
	case hasSlash && topDirs[first]:
	case !hasSlash && (ext == ".go" || ext == ".json" && strings.Contains(s, "-")):
	default:
		return false, false
	}
	if strings.ContainsAny(s, " *{}<>") || strings.Contains(s, "PKG") || strings.Contains(s, "DIR") {
		return false, false
	}
	if ix.files[s] || ix.dirs[s] {
		return true, true
	}
	for f := range ix.files {
		if strings.HasSuffix(f, "/"+s) {
			return true, true
		}
	}
	return true, false
}

func (ix *index) checkIdent(s string) (checked, ok bool) {
	if !identRE.MatchString(s) || fileRE.MatchString(s) || external[s] {
		return false, false
	}
	if ix.isConfig(s) {
		return true, true
	}
	parts := strings.Split(s, ".")
	if len(parts) == 1 {
		if strings.Contains(s, "_") || !camelRE.MatchString(s) {
			return false, false
		}
		return true, ix.declared[s]
	}
	p, rest := parts[0], parts[1:]
	if strings.HasSuffix(p, "_test") {
		p = strings.TrimSuffix(p, "_test")
		if ix.pkgs[p+"_test"] != nil && ix.pkgs[p+"_test"][rest[0]] {
			return true, true
		}
	}
	if decls, isPkg := ix.pkgs[p]; isPkg {
		if !decls[rest[0]] && !(ix.pkgs[p+"_test"] != nil && ix.pkgs[p+"_test"][rest[0]]) {
			if _, isType := ix.types[p]; isType && ix.hasMember(p, rest[0], 0) {
				return true, true // a type named like a package (stream, table)
			}
			return true, false
		}
		if len(rest) > 1 {
			return true, ix.hasMember(rest[0], rest[1], 0)
		}
		return true, true
	}
	if _, isType := ix.types[p]; isType {
		if !ix.hasMember(p, rest[0], 0) {
			return true, false
		}
		for _, r := range rest[1:] {
			if !ix.declared[r] {
				return true, false
			}
		}
		return true, true
	}
	return false, false
}

// sectionRE matches a cited section: docs/NAME.md (or NAME.md, or a
// bench/results campaign), a comma perhaps, and the section's name quoted.
var sectionRE = regexp.MustCompile(`((?:docs/)?[a-z-]+\.md|bench/results/[a-z0-9-]+),? "([^"]+)"`)

// checkSections reports every cited section of docs and of the Go files'
// comments that names no heading (nor bold lead-in) of its document.
func checkSections(docs, goFiles []string) int {
	bad := 0
	check := func(where, text string) {
		for _, m := range sectionRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			switch {
			case strings.HasPrefix(target, "bench/results/"):
				target += "/README.md"
			case !strings.HasPrefix(target, "docs/"):
				target = "docs/" + target
			}
			data, err := os.ReadFile(target)
			if err != nil {
				fmt.Printf("%s: cites %s, which does not exist\n", where, m[0])
				bad++
				continue
			}
			if !hasSection(string(data), m[2]) {
				fmt.Printf("%s: cites %s: no such section in %s\n", where, m[0], target)
				bad++
			}
		}
	}
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			continue
		}
		// Paragraphs joined into lines, so that a name wrapped across lines
		// is found.
		for _, para := range strings.Split(string(data), "\n\n") {
			check(doc, strings.Join(strings.Fields(para), " "))
		}
	}
	for _, f := range goFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var comment []string
		flush := func() {
			check(f, strings.Join(comment, " "))
			comment = comment[:0]
		}
		for _, line := range strings.Split(string(data), "\n") {
			if _, c, ok := strings.Cut(line, "//"); ok {
				comment = append(comment, strings.Fields(c)...)
				continue
			}
			flush()
		}
		flush()
	}
	return bad
}

// hasSection reports whether doc has a heading, or a bold lead-in, that
// begins with name (case and backquotes aside).
func hasSection(doc, name string) bool {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "`", "")) }
	name = norm(name)
	for _, line := range strings.Split(doc, "\n") {
		l := strings.TrimSpace(line)
		l = strings.TrimLeft(l, "-* ")
		if strings.HasPrefix(line, "#") {
			l = strings.TrimLeft(line, "# ")
		} else if b, ok := strings.CutPrefix(strings.TrimLeft(strings.TrimSpace(line), "- "), "**"); ok {
			l = b
		} else {
			continue
		}
		if strings.HasPrefix(norm(l), name) {
			return true
		}
	}
	return false
}

// checkLocks reports every mutex of the relay that doc's "Locks" section
// does not name as Type.field, and every dotted name of that section's lock
// order (a fenced block) that is no declaration.
func (ix *index) checkLocks(doc string) int {
	data, err := os.ReadFile(doc)
	if err != nil {
		return 0
	}
	text := string(data)
	i := strings.Index(text, "\n## Locks\n")
	if i < 0 {
		fmt.Printf("%s: no \"## Locks\" section\n", doc)
		return 1
	}
	sec := text[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	bad := 0
	for _, m := range ix.mutexes {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(m) + `\b`).MatchString(sec) {
			fmt.Printf("%s: the lock order does not name %s\n", doc, m)
			bad++
		}
	}
	if a := strings.Index(sec, "```\n"); a >= 0 {
		if b := strings.Index(sec[a+4:], "```"); b >= 0 {
			for _, name := range regexp.MustCompile(`[A-Za-z_]\w*(\.[A-Za-z_]\w*)+`).FindAllString(sec[a+4:a+4+b], -1) {
				if checked, ok := ix.checkIdent(name); !checked || !ok {
					fmt.Printf("%s: the lock order names %s, which is no declaration\n", doc, name)
					bad++
				}
			}
		}
	}
	return bad
}

// checkStructRow checks a row of a table whose first column is "struct":
// the first cell names types of the module, and every plain identifier in
// backquotes in the other cells is a field or method of one of them.
func (ix *index) checkStructRow(doc string, n int, line string) int {
	cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	if len(cells) < 2 {
		return 0
	}
	var types []string
	for _, m := range spanRE.FindAllStringSubmatch(cells[0], -1) {
		if strings.ContainsAny(m[1], "./") {
			continue // a file or a qualified name: checked as any other
		}
		if _, ok := ix.types[m[1]]; !ok {
			fmt.Printf("%s:%d: no type %s\n", doc, n, m[1])
			return 1
		}
		types = append(types, m[1])
	}
	if len(types) == 0 {
		return 0
	}
	// Types the row's other cells name (a type, or the first part of
	// Type.field) lend it their members too.
	for _, m := range spanRE.FindAllStringSubmatch(strings.Join(cells[1:], "|"), -1) {
		first, _, _ := strings.Cut(m[1], ".")
		if _, ok := ix.types[first]; ok {
			types = append(types, first)
		}
	}
	bad := 0
	for _, c := range cells[1:] {
		for _, m := range spanRE.FindAllStringSubmatch(c, -1) {
			name := m[1]
			if external[name] || token.IsExported(name) && ix.declaredTop(name) {
				continue
			}
			if strings.ContainsAny(name, ". ()") || !identRE.MatchString(name) {
				continue // qualified: checked as any other name
			}
			found := false
			for _, t := range types {
				if ix.rowMember(t, name, 0) {
					found = true
				}
			}
			if _, isType := ix.types[name]; !found && !isType {
				fmt.Printf("%s:%d: %s is no field or method of %s\n", doc, n, name, strings.Join(types, ", "))
				bad++
			}
		}
	}
	return bad
}

func (ix *index) check(doc string) int {
	f, err := os.Open(doc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	bad, n, fenced, structs := 0, 0, false, false
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "| struct"):
			structs = true
		case !strings.HasPrefix(line, "|"):
			structs = false
		case structs && !strings.HasPrefix(line, "|---"):
			bad += ix.checkStructRow(doc, n, line)
		}
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range spanRE.FindAllStringSubmatch(line, -1) {
			s := strings.TrimSuffix(strings.TrimSpace(m[1]), "()")
			if isPath, ok := ix.checkPath(s); isPath {
				if !ok {
					fmt.Printf("%s:%d: no file or directory %s\n", doc, n, s)
					bad++
				}
				continue
			}
			if checked, ok := ix.checkIdent(s); checked && !ok {
				fmt.Printf("%s:%d: no Go declaration %s\n", doc, n, s)
				bad++
			}
		}
	}
	return bad
}
