package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/xds-relay/xds-relay/relay/overload"
	"github.com/xds-relay/xds-relay/shard"
)

// adminHandler serves the admin endpoints: health, readiness, JSON state
// under /debug/ and pprof. See docs/operations.md.
func (r *Relay) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", r.statusPage()) // the operator's page; JSON under /debug/ for scripts
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.ready.Load() {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(escapeText([]byte("ok\n" + r.staleNote())))
	})
	mux.HandleFunc("GET /debug/classes", func(w http.ResponseWriter, _ *http.Request) {
		type classJSON struct {
			Name    string `json:"name"`
			Node    string `json:"first_node"`
			Types   int    `json:"types"`
			Streams int    `json:"subscriptions"`
			Linger  int    `json:"lingering_shards"`
		}
		out := []classJSON{} // [] when there is none, not null
		for _, c := range r.registry.Classes() {
			cj := classJSON{Name: c.Name, Node: c.Node.GetId()}
			for _, ts := range c.Status() {
				cj.Types++
				for _, s := range ts.Shards {
					cj.Streams += s.Streams
					if s.Lingering {
						cj.Linger++
					}
				}
			}
			out = append(out, cj)
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /debug/shards", func(w http.ResponseWriter, _ *http.Request) {
		out := map[string][]shard.TableStatus{}
		for _, c := range r.registry.Classes() {
			out[c.Name] = c.Status()
		}
		writeJSON(w, out)
	})
	mux.HandleFunc("GET /debug/streams", func(w http.ResponseWriter, req *http.Request) {
		limit := 1000
		if v := req.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				http.Error(w, "limit: want a non-negative integer", http.StatusBadRequest)
				return
			}
			limit = n
		}
		writeJSON(w, map[string]any{"count": r.server.StreamCount(), "streams": r.server.Streams(limit)})
	})
	mux.HandleFunc("GET /debug/upstream", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case r.upstream != nil:
			out := map[string]any{"mode": "ads", "protocol": r.cfg.Upstream.Protocol, "address": r.cfg.Upstream.Address, "streams": r.upstream.Status()}
			if r.cfg.Upstream.Affinity == "class" {
				out["affinity"], out["members"] = "class", r.upstream.Members()
			}
			writeJSON(w, out)
		default:
			writeJSON(w, map[string]any{"mode": "files", "source": r.files.Status()})
		}
	})
	mux.HandleFunc("GET /debug/store", func(w http.ResponseWriter, _ *http.Request) {
		n, b := r.store.Counts()
		writeJSON(w, map[string]int64{"resources": n, "bytes": b})
	})
	mux.HandleFunc("GET /debug/overload", func(w http.ResponseWriter, _ *http.Request) {
		st, ok := r.overloadStatus()
		if !ok {
			st = overload.Status{State: "off", BudgetFrom: overload.FromOff}
		}
		writeJSON(w, st)
	})
	mux.HandleFunc("GET /debug/drops", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, r.dropCounts())
	})
	mux.Handle("GET /metrics", r.tel.handler)
	if r.level != nil {
		mux.Handle("/debug/logging", levelHandler(*r.level))
	}
	mux.HandleFunc("GET /debug/{$}", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, adminIndex(r.level != nil))
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// staleNote is the readiness body's line saying the file source is stale
// ("" when it is not). A stale source leaves the relay ready: its clients are
// served the last good state, which restarting or failing over to another
// relay (with the same files) would not improve on.
func (r *Relay) staleNote() string {
	if r.files == nil {
		return ""
	}
	st := r.files.Status()
	if st.LastError == "" {
		return ""
	}
	return fmt.Sprintf("file source stale: serving the state loaded at %s; the load at %s failed: %s\n",
		st.LoadedAt.UTC().Format(time.RFC3339), st.FailedAt.UTC().Format(time.RFC3339), truncate(st.LastError, statusMaxText))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	_, _ = w.Write(escapeJSON(buf.Bytes()))
}
