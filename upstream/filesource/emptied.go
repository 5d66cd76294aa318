package filesource

// This file refuses a reload that would empty a type by removal: the
// deploy that removed clusters.yaml and listeners.yaml (and kept the rest)
// would otherwise remove every cluster and listener from every client.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrTypesEmptied is the error of a reload that finds no resource of a type
// the served state has resources of, and no file declaring the type empty.
// Like a load without any resource (ErrNoResources) it is refused whole:
// the last good state stays, reported stale, until a load that keeps the
// type or declares it empty. A file declaring a type empty holds its
// type_url and no resources:
//
//	type_url: type.googleapis.com/envoy.config.listener.v3.Listener
//	resources: []
//
// The check compares with the state served: New, with no state before it,
// serves whatever the directory holds.
var ErrTypesEmptied = errors.New("types emptied")

// checkKeepsTypes returns an error wrapping ErrTypesEmptied when snap has
// no resource of a type the served state has resources of, and none of its
// files declares the type empty.
func (s *Source) checkKeepsTypes(snap *snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lost []string
	first := ""
	for _, typeURL := range applyOrder(slices.Collect(maps.Keys(s.state))) {
		served := len(s.state[typeURL].resources)
		if next := snap.types[typeURL]; served == 0 || (next != nil && len(next.resources) > 0) || snap.empty[typeURL] {
			continue
		}
		if first == "" {
			first = typeURL
		}
		lost = append(lost, fmt.Sprintf("%d %s (%s)", served, shortType(typeURL), fileList(s.from[typeURL])))
	}
	if len(lost) == 0 {
		return nil
	}
	return fmt.Errorf("filesource: %s: %w: refusing a state without the %s served, which would remove them from every client; "+
		"to empty a type on purpose, add a file holding its type_url and no resources (`type_url: %s`, `resources: []`)",
		s.dir, ErrTypesEmptied, strings.Join(lost, ", "), first)
}

// maxNamedFiles bounds the files the error names per type.
const maxNamedFiles = 5

// fileList names files, the first maxNamedFiles of them.
func fileList(files []string) string {
	if len(files) <= maxNamedFiles {
		return strings.Join(files, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(files[:maxNamedFiles], ", "), len(files)-maxNamedFiles)
}
