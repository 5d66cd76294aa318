package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The import graph points one way (style habit 1): dedup imports nothing of
// the module; shard builds on dedup; relay and upstream build on shard and
// never import each other's packages; only cmd and bench assemble them. A
// leaf that relay and upstream share goes under shard.
func TestImportsPointOneWay(t *testing.T) {
	const module = "github.com/xds-relay/xds-relay/"
	mayImport := map[string][]string{
		"dedup":    {"dedup"},
		"shard":    {"dedup", "shard"},
		"relay":    {"dedup", "shard", "relay"},
		"upstream": {"dedup", "shard", "upstream"},
	}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		allowed, ruled := mayImport[top]
		if !ruled {
			return nil // cmd, bench, deploy
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			rest, ok := strings.CutPrefix(path, module)
			if !ok {
				continue
			}
			impTop, _, _ := strings.Cut(rest, "/")
			if !slices.Contains(allowed, impTop) {
				t.Errorf("%s imports %s: %s/ may import only %v", rel, rest, top, allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
