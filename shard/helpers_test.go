package shard

import (
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

func mustClassifier(t testing.TB, rules []Rule) *Classifier {
	t.Helper()
	c, err := NewClassifier(rules)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	if m == nil {
		return nil
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// concurrently runs f(0) … f(n-1) on n goroutines and waits for them all.
func concurrently(n int, f func(g int)) {
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(g)
		}()
	}
	wg.Wait()
}
