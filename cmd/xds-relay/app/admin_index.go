package app

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"go.uber.org/zap"
)

// adminEndpoint is one line of the admin port's index (GET /debug/).
type adminEndpoint struct {
	Path        string `json:"path"`
	Methods     string `json:"methods"`
	Description string `json:"description"`
}

// adminIndex lists the admin endpoints: docs/operations.md describes each.
func adminIndex(logLevel bool) []adminEndpoint {
	out := []adminEndpoint{
		{"/", "GET", "status page (HTML)"},
		{"/healthz", "GET", "liveness: ok while the process serves"},
		{"/readyz", "GET", "readiness: 503 while starting or draining"},
		{"/metrics", "GET", "Prometheus metrics"},
		{"/debug/", "GET", "this index"},
		{"/debug/classes", "GET", "node classes (JSON)"},
		{"/debug/shards", "GET", "per-class types and shards (JSON)"},
		{"/debug/streams", "GET", "downstream streams, ?limit=N (JSON)"},
		{"/debug/upstream", "GET", "upstream streams or file source state (JSON)"},
		{"/debug/drops", "GET", "what the relay did not send, by reason (JSON)"},
		{"/debug/store", "GET", "distinct resources held for all classes, and their bytes (JSON)"},
		{"/debug/overload", "GET", "the memory ceiling: budget, marks, heap, state, sheds and refusals (JSON)"},
	}
	if logLevel {
		out = append(out, adminEndpoint{"/debug/logging", "GET, PUT", `log level: PUT {"level":"debug"} or level=debug`})
	}
	return append(out, adminEndpoint{"/debug/pprof/", "GET", "Go profiles (pprof)"})
}

// levelHandler is zap's level endpoint, which also takes a plain body
// ("level=debug" or "debug") whatever its Content-Type, as operators type
// it with curl.
func levelHandler(level zap.AtomicLevel) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json") // zap answers JSON, errors included
		if req.Method != http.MethodPut || strings.HasPrefix(req.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			level.ServeHTTP(w, req)
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 1024))
		if err != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		body = bytes.TrimSpace(body)
		if !bytes.HasPrefix(body, []byte("{")) {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if !bytes.HasPrefix(body, []byte("level=")) {
				body = append([]byte("level="), body...)
			}
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		level.ServeHTTP(w, req)
	})
}
