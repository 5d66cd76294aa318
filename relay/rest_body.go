package relay

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// restBody is a REST request's body, inflated when it is gzip and
// compressed requests are allowed; the HTTP status and error name the
// problem otherwise. Either way at most MaxRESTBody bytes are read from
// the wire and at most MaxRESTBody+1 inflated.
func (s *Server) restBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	body := http.MaxBytesReader(w, r.Body, MaxRESTBody)
	switch enc := r.Header.Get("Content-Encoding"); {
	case enc == "" || enc == "identity":
		return readRESTBody(body)
	case !s.opts.AllowCompressedRequests:
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("Content-Encoding %q: compressed requests are refused (%s is off); send the body uncompressed", truncName(enc), AllowCompressedKey)
	case enc != "gzip":
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("Content-Encoding %q: only gzip is accepted", truncName(enc))
	default:
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf("Content-Encoding gzip: %v", err)
		}
		defer zr.Close()
		data, code, err := readRESTBody(io.LimitReader(zr, MaxRESTBody+1))
		if err == nil && len(data) > MaxRESTBody {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body inflates past %d bytes", MaxRESTBody)
		}
		return data, code, err
	}
}

// readRESTBody reads r whole; a body over http.MaxBytesReader's limit is
// 413, another failure 400.
func readRESTBody(r io.Reader) ([]byte, int, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("request body exceeds %d bytes", mbe.Limit)
		}
		if isTimeout(err) {
			return nil, http.StatusRequestTimeout, errors.New("rest.read_timeout: the request body did not arrive in time")
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request body: %v", err)
	}
	return data, 0, nil
}
