package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/xds-relay/xds-relay/bench"
)

// Run is one measured fan-out run, as the bench wrote it. Fields a file
// predates (server_rss_base_bytes, streams_per_conn, service, bytes_total)
// are zero.
type Run = bench.FanoutResult

// Load reads and merges the runs of every file, in order. An error names the
// file at fault.
func Load(paths ...string) ([]Run, error) {
	var runs []Run
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		rs, err := Decode(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		runs = append(runs, rs...)
	}
	return runs, nil
}

// Decode reads one JSON value: a single result object or an array of them.
// Unknown fields are ignored; a run without a target or clients is an error.
func Decode(r io.Reader) ([]Run, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, errors.New("empty file: want a result object or an array of them")
	}
	var runs []Run
	if b[0] == '[' {
		if err := json.Unmarshal(b, &runs); err != nil {
			return nil, fmt.Errorf("decoding an array of results: %w", err)
		}
	} else {
		var one Run
		if err := json.Unmarshal(b, &one); err != nil {
			return nil, fmt.Errorf("decoding a result: %w", err)
		}
		runs = []Run{one}
	}
	for i, r := range runs {
		if r.Target == "" || r.Clients <= 0 {
			return nil, fmt.Errorf("result %d: target %q, clients %d: not a fan-out result", i, r.Target, r.Clients)
		}
	}
	return runs, nil
}
