package app_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/xds-relay/xds-relay/cmd/xds-relay/app"
)

// statusNACK is the message of the client's NACK: markup and quotes that the
// page must show as text.
const statusNACK = `cluster "a-frontend": <lb_policy> MAGLEV & ring_hash unsupported`

// statusFixture is a relay in front of go-control-plane with two node
// classes, a few clients, and one client that NACKed its CDS response.
type statusFixture struct {
	mgmt     *controlPlane
	relay    *app.Relay
	url      string            // the status page
	versions map[string]string // CDS version served, by class
}

func startStatusFixture(t *testing.T) statusFixture {
	t.Helper()
	// Longer than testContext: the clients' streams must outlive the
	// browser runs.
	ctx, cancelAll := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancelAll)
	m := startMgmt(t, "127.0.0.1:0")
	m.Set(t, "class-a", "v1-a", clusters("a-backend", "a-frontend"))
	m.Set(t, "class-b", "v1-b", clusters("b-backend", "b-cache", "b-frontend"))
	r := startRelay(t, m.Addr)
	f := statusFixture{mgmt: m, relay: r, versions: map[string]string{}}

	// class-a: three wildcard clients; class-b: one wildcard client and one
	// subscribed to b-cache only (a second shard).
	for i := range 3 {
		c := dialADS(t, ctx, r.Addr(), fmt.Sprintf("a-client-%d", i), "class-a")
		c.Subscribe(resource.ClusterType)
		f.versions["class-a"] = c.Next(10 * time.Second).GetVersionInfo()
	}
	b := dialADS(t, ctx, r.Addr(), "b-client-0", "class-b")
	b.Subscribe(resource.ClusterType)
	f.versions["class-b"] = b.Next(10 * time.Second).GetVersionInfo()
	bNamed := dialADS(t, ctx, r.Addr(), "b-client-named", "class-b")
	bNamed.Subscribe(resource.ClusterType, "b-cache")
	bNamed.Next(10 * time.Second)

	// The NACKing client, by hand: the response's nonce and error_detail.
	conn, err := grpc.NewClient(r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() {
		cancel()
		_ = conn.Close()
	})
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "a-nacker", Cluster: "class-a"}, TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "", ResponseNonce: resp.GetNonce(),
		ErrorDetail: &status.Status{Code: 3, Message: statusNACK}}); err != nil {
		t.Fatal(err)
	}

	eventually(t, ctx, "the client's NACK counted", func() bool {
		for _, s := range r.Server().Streams(0) {
			for _, ts := range s.Types {
				if s.Node == "a-nacker" && ts.NACKs == 1 {
					return true
				}
			}
		}
		return false
	})
	eventually(t, ctx, "both upstream streams connected and ACKing", func() bool {
		a, b := upstreamStatus(t, ctx, r, "class-a"), upstreamStatus(t, ctx, r, "class-b")
		return a.State == "connected" && b.State == "connected" && a.ACKs > 0 && b.ACKs > 0
	})

	srv := httptest.NewServer(app.StatusPage(r))
	t.Cleanup(srv.Close)
	f.url = srv.URL + "/"
	return f
}

// TestStatusPageHTTP checks the page over plain HTTP: an HTML page with the
// classes, the upstream state and the NACK message (escaped); other paths
// are not the page.
func TestStatusPageHTTP(t *testing.T) {
	f := startStatusFixture(t)
	ctx := testContext(t)

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type %q, want text/html", ct)
	}

	body, code := get(t, ctx, f.url)
	if code != http.StatusOK {
		t.Fatalf("GET /: status %d\n%s", code, body)
	}
	page := string(body)
	for _, want := range []string{"class-a", "class-b", "connected", "a-nacker", html.EscapeString(statusNACK)} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<lb_policy>") {
		t.Errorf("the NACK message is not escaped:\n%s", page)
	}
	checkStatusDOM(t, page, f)

	if _, code := get(t, ctx, strings.TrimSuffix(f.url, "/")+"/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: status %d, want 404", code)
	}
}

// TestStatusPageUpstreamDown stops the control plane: the page shows the
// upstream streams out of "connected" (amber badge) and their errors.
func TestStatusPageUpstreamDown(t *testing.T) {
	f := startStatusFixture(t)
	ctx := testContext(t)
	f.mgmt.Stop()
	eventually(t, ctx, "both upstream streams to fail", func() bool {
		a, b := upstreamStatus(t, ctx, f.relay, "class-a"), upstreamStatus(t, ctx, f.relay, "class-b")
		return a.State != "connected" && a.LastError != "" && b.State != "connected" && b.LastError != ""
	})
	body, code := get(t, ctx, f.url)
	if code != http.StatusOK {
		t.Fatalf("GET /: status %d\n%s", code, body)
	}
	page := string(body)
	up := tableRows(t, page, "upstream")
	for _, class := range []string{"class-a", "class-b"} {
		row := findRow(up, 0, class)
		if row == nil {
			t.Fatalf("upstream table: no row for %s: %v", class, texts(up))
		}
		if state := row.text[1]; (state != "backoff" && state != "connecting") || !strings.Contains(row.cells[1], `class="badge warn"`) {
			t.Errorf("upstream %s: state %q (%s), want an amber backoff or connecting badge", class, state, row.cells[1])
		}
		if row.text[8] == "" || row.text[8] == "–" {
			t.Errorf("upstream %s: no last error: %v", class, row.text)
		}
		// The errors table repeats it.
		var found bool
		for _, e := range tableRows(t, page, "nacks") {
			if len(e.text) == 3 && e.text[0] == "upstream "+class && e.text[2] == row.text[8] {
				found = true
			}
		}
		if !found {
			t.Errorf("errors table lacks %s's error %q", class, row.text[8])
		}
	}
	if !strings.Contains(page, `id="health"`) || !strings.Contains(page, "upstream down") {
		t.Errorf("the summary badge does not say the upstream is down")
	}
	// The clients' NACK is still listed.
	if findRow(tableRows(t, page, "nacks"), 1, "a-nacker") == nil {
		t.Errorf("the NACK row is gone")
	}
	screenshotIfChromium(t, f.url, "status-upstream-down.png")
}

// screenshotIfChromium takes a screenshot of url for a person to look at
// (go test -artifacts keeps it), when Chromium is installed.
func screenshotIfChromium(t *testing.T, url, name string) {
	t.Helper()
	for _, browser := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(browser); err == nil {
			shot := filepath.Join(t.ArtifactDir(), name)
			runChromium(t, p, "--screenshot="+shot, "--window-size=1280,1600", "--hide-scrollbars", url)
			t.Logf("screenshot: %s", shot)
			return
		}
	}
}

// TestStatusPageFileSource: in file-source mode the page shows the directory
// and the source's state instead of upstream streams.
func TestStatusPageFileSource(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, "", sampleSource())
	c := dialADS(t, ctx, r.Addr(), "file-client", "class-f")
	c.Subscribe(resource.ClusterType)
	c.Next(10 * time.Second)
	srv := httptest.NewServer(app.StatusPage(r))
	t.Cleanup(srv.Close)

	var page string
	eventually(t, ctx, "the page to show the directory watched", func() bool {
		body, code := get(t, ctx, srv.URL+"/")
		page = string(body)
		return code == http.StatusOK && strings.Contains(page, `<span class="badge ok">watching</span>`)
	})
	up := tableRows(t, page, "upstream")
	if len(up) != 1 || up[0].text[0] != sampleDir || up[0].text[1] != "watching" || !strings.Contains(up[0].text[6], "CDS") {
		t.Errorf("file source row %v, want %s watching with CDS resources", texts(up), sampleDir)
	}
	if row := findRow(tableRows(t, page, "classes"), 0, "class-f"); row == nil || row.text[3] != "1" {
		t.Errorf("classes table: want class-f with 1 stream: %v", texts(tableRows(t, page, "classes")))
	}
	if !strings.Contains(page, `<dd id="mode">files</dd>`) {
		t.Errorf("the header does not say files mode")
	}
	screenshotIfChromium(t, srv.URL+"/", "status-files.png")
}

// TestStatusPageChromium loads the page in headless Chromium and checks the
// DOM it rendered, then takes a screenshot.
func TestStatusPageChromium(t *testing.T) {
	browser := chromiumPath(t)
	f := startStatusFixture(t)

	dom := runChromium(t, browser, "--dump-dom", f.url)
	checkStatusDOM(t, dom, f)

	shot := filepath.Join(t.ArtifactDir(), "status.png")
	runChromium(t, browser, "--screenshot="+shot, "--window-size=1280,1600", "--hide-scrollbars", f.url)
	fi, err := os.Stat(shot)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if fi.Size() < 10<<10 {
		t.Errorf("screenshot %s is %d bytes, want a rendered page (> 10 KiB)", shot, fi.Size())
	}
	png := make([]byte, 8)
	if fh, err := os.Open(shot); err == nil {
		_, _ = fh.Read(png)
		fh.Close()
	}
	if string(png) != "\x89PNG\r\n\x1a\n" {
		t.Errorf("screenshot %s is not a PNG", shot)
	}
	t.Logf("screenshot: %s (%d bytes; kept with go test -artifacts)", shot, fi.Size())
}

// chromiumPath finds Chromium; without it the test is skipped, except in CI
// (CI=true), which installs it (.ci/install-chromium.sh).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not on PATH, and CI=true: .ci/install-chromium.sh should have installed it")
	}
	t.Skip("chromium (or chromium-browser) is not on PATH: install it (.ci/install-chromium.sh) to run the browser test of the status page")
	return ""
}

// runChromium runs headless Chromium with args and returns its stdout.
func runChromium(t *testing.T, browser string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(),
	}
	cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
	cmd.WaitDelay = 5 * time.Second // children holding the pipes
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstderr:\n%s", browser, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// checkStatusDOM checks what an operator sees on the page (served HTML or
// the DOM Chromium rendered).
func checkStatusDOM(t *testing.T, page string, f statusFixture) {
	t.Helper()
	if m := regexp.MustCompile(`(?s)<title>(.*?)</title>`).FindStringSubmatch(page); m == nil {
		t.Errorf("no title:\n%s", page)
	} else if title := html.UnescapeString(m[1]); !strings.Contains(title, "xds-relay") || !strings.Contains(title, relayID) {
		t.Errorf("title %q, want xds-relay and the relay id %q", title, relayID)
	}

	// Upstream: one row per class, connected (green badge).
	up := tableRows(t, page, "upstream")
	for _, class := range []string{"class-a", "class-b"} {
		row := findRow(up, 0, class)
		if row == nil {
			t.Errorf("upstream table: no row for %s: %v", class, texts(up))
			continue
		}
		if row.text[1] != "connected" || !strings.Contains(row.cells[1], `class="badge ok"`) {
			t.Errorf("upstream %s: state %q (%s), want a green connected badge", class, row.text[1], row.cells[1])
		}
		if row.text[3] != "0" {
			t.Errorf("upstream %s: %q restarts, want 0", class, row.text[3])
		}
	}

	// Node classes: streams and client NACKs per class.
	classes := tableRows(t, page, "classes")
	wantStreams := map[string]string{"class-a": "4", "class-b": "2"}
	wantNACKs := map[string]string{"class-a": "1", "class-b": "0"}
	for class, n := range wantStreams {
		row := findRow(classes, 0, class)
		if row == nil {
			t.Errorf("classes table: no row for %s: %v", class, texts(classes))
			continue
		}
		if row.text[3] != n || row.text[6] != wantNACKs[class] || !strings.Contains(row.text[5], "CDS") {
			t.Errorf("classes table %s: %v, want %s streams, CDS, %s client NACKs", class, row.text, n, wantNACKs[class])
		}
	}

	// Shards: CDS of each class at the version its clients got.
	shards := tableRows(t, page, "shards")
	for class, version := range f.versions {
		found := false
		for _, row := range shards {
			if len(row.text) == 7 && row.text[0] == class && row.text[1] == "CDS" && row.text[3] == version && version != "" {
				found = true
			}
		}
		if !found {
			t.Errorf("shards table: no CDS shard of %s at version %q: %v", class, version, texts(shards))
		}
	}
	if row := findRow(shards, 2, "b-cache"); row == nil || row.text[0] != "class-b" || row.text[6] != "1" {
		t.Errorf("shards table: want class-b's b-cache shard with 1 stream: %v", texts(shards))
	}

	// NACKs: the client, its count and its message, as text.
	nacks := tableRows(t, page, "nacks")
	row := findRow(nacks, 1, "a-nacker")
	if row == nil {
		t.Fatalf("NACK table: no row for a-nacker: %v", texts(nacks))
	}
	if row.text[2] != "class-a" || row.text[3] != "CDS" || row.text[4] != "1" || row.text[5] != statusNACK {
		t.Errorf("NACK row %v, want class-a CDS 1 %q", row.text, statusNACK)
	}

	for _, link := range []string{"/debug/classes", "/debug/shards", "/debug/streams", "/debug/upstream", "/debug/pprof/", "/metrics"} {
		if !strings.Contains(page, `href="`+link+`"`) {
			t.Errorf("no link to %s", link)
		}
	}
}

// htmlRow is a table row: its cells' inner HTML and visible text.
type htmlRow struct {
	cells []string
	text  []string
}

var (
	rowRE  = regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`)
	cellRE = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	tagRE  = regexp.MustCompile(`(?s)<[^>]*>`)
	wsRE   = regexp.MustCompile(`\s+`)
)

// tableRows returns the body rows of the tables in the section with id.
func tableRows(t *testing.T, page, id string) []htmlRow {
	t.Helper()
	start := strings.Index(page, `<section id="`+id+`"`)
	if start < 0 {
		t.Fatalf("no section %q", id)
	}
	section := page[start:]
	if end := strings.Index(section, "</section>"); end >= 0 {
		section = section[:end]
	}
	var rows []htmlRow
	for _, m := range rowRE.FindAllStringSubmatch(section, -1) {
		var r htmlRow
		for _, c := range cellRE.FindAllStringSubmatch(m[1], -1) {
			r.cells = append(r.cells, c[1])
			text := html.UnescapeString(tagRE.ReplaceAllString(c[1], " "))
			r.text = append(r.text, strings.TrimSpace(wsRE.ReplaceAllString(text, " ")))
		}
		if len(r.cells) > 0 {
			rows = append(rows, r)
		}
	}
	return rows
}

// findRow returns the first row whose column col reads text.
func findRow(rows []htmlRow, col int, text string) *htmlRow {
	for i := range rows {
		if len(rows[i].text) > col && rows[i].text[col] == text {
			return &rows[i]
		}
	}
	return nil
}

func texts(rows []htmlRow) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = r.text
	}
	return out
}
