package manager

import (
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/quarry-dev/quarry/fsm"
)

// pageBuckets caps the buckets listed on the cluster page.
const pageBuckets = 200

type pageData struct {
	Self     string
	Now      string
	Status   fsm.Status
	Sites    []pageSite
	Managers ManagersView
	Buckets  []fsm.BucketView
	More     int
	Config   fsm.Config
	RF, SF   string
}

type pageSite struct {
	Name string
	fsm.SiteStatus
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"join": strings.Join,
	"yes": func(b bool) template.HTML {
		if b {
			return `<span class="ok">yes</span>`
		}
		return `<span class="bad">no</span>`
	},
	"primaries": func(p map[string]string) string {
		keys := make([]string, 0, len(p))
		for k := range p {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+"="+p[k])
		}
		return strings.Join(parts, " ")
	},
	"copies": func(cs []fsm.CopyView) string {
		parts := make([]string, 0, len(cs))
		for _, c := range cs {
			s := c.Peer
			if c.Searchable {
				s += "*"
			}
			if c.Corrupt {
				s += "!"
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, " ")
	},
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>quarry cluster — {{.Self}}</title>
<meta http-equiv="refresh" content="5">
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:.92em}
th{background:#f3f3f3}.ok{color:#070;font-weight:600}.bad{color:#b00;font-weight:600}
code{background:#f5f5f5;padding:0 .2em}
</style></head><body>
<h1>quarry cluster</h1>
<p>Served by manager <b>{{.Self}}</b> at {{.Now}} · leader <b>{{if .Status.Leader}}{{.Status.Leader}}{{else}}<span class="bad">none</span>{{end}}</b>
· generation <b>{{.Status.Generation}}</b> · maintenance {{yes .Status.Maintenance}}</p>
<h2>Health</h2>
<table><tr><th>valid</th><th>complete</th><th>replication factor met</th><th>search factor met</th><th>RF policy</th><th>SF policy</th></tr>
<tr><td>{{yes .Status.Valid}}</td><td>{{yes .Status.Complete}}</td><td>{{yes .Status.ReplicationFactorMet}}</td><td>{{yes .Status.SearchFactorMet}}</td><td><code>{{.RF}}</code></td><td><code>{{.SF}}</code></td></tr></table>
<h2>Sites</h2>
<table><tr><th>site</th><th>valid</th><th>complete</th><th>invalid buckets</th><th>incomplete buckets</th></tr>
{{range .Sites}}<tr><td>{{.Name}}</td><td>{{yes .Valid}}</td><td>{{yes .Complete}}</td><td>{{len .InvalidBuckets}}</td><td>{{len .IncompleteBuckets}}</td></tr>
{{end}}</table>
<h2>Managers</h2>
<table><tr><th>id</th><th>site</th><th>raft</th><th>http</th><th>voter</th><th>leader</th></tr>
{{range .Managers.Managers}}<tr><td>{{.ID}}</td><td>{{.Site}}</td><td>{{.RaftAddr}}</td><td>{{if .HTTPAddr}}<a href="http://{{.HTTPAddr}}/">{{.HTTPAddr}}</a>{{end}}</td><td>{{yes .Voter}}</td><td>{{if .Leader}}<b>leader</b>{{end}}</td></tr>
{{end}}</table>
<h2>Peers</h2>
<table><tr><th>id</th><th>site</th><th>state</th><th>buckets</th><th>primaries</th><th>searchable</th></tr>
{{range .Status.Peers}}<tr><td>{{.ID}}</td><td>{{.Site}}</td><td>{{.State}}</td><td>{{.Buckets}}</td><td>{{.Primaries}}</td><td>{{.Searchable}}</td></tr>
{{else}}<tr><td colspan="6">no peers registered</td></tr>{{end}}</table>
<h2>Pending fixups</h2>
<table><tr><th>bucket</th><th>level</th><th>reason</th><th>task</th></tr>
{{range .Status.Fixups}}<tr><td>{{.Bucket}}</td><td>{{.Level}}</td><td>{{.Reason}}</td><td>{{if .Task}}{{.Task}}{{end}}</td></tr>
{{else}}<tr><td colspan="4">none</td></tr>{{end}}</table>
<h2>Buckets</h2>
<table><tr><th>bucket</th><th>index</th><th>origin</th><th>hot</th><th>events</th><th>copies (* searchable)</th><th>primaries</th></tr>
{{range .Buckets}}<tr><td>{{.ID}}</td><td>{{.Index}}</td><td>{{.Origin}}</td><td>{{if .Hot}}hot{{else}}warm{{end}}</td><td>{{.Events}}</td><td>{{copies .Copies}}</td><td>{{primaries .Primary}}</td></tr>
{{else}}<tr><td colspan="7">no buckets</td></tr>{{end}}</table>
{{if .More}}<p>… and {{.More}} more (see <code>GET /v1/buckets</code>).</p>{{end}}
</body></html>
`))

// handlePage is GET /: the cluster page.
func (m *Manager) handlePage(w http.ResponseWriter, r *http.Request) {
	d := pageData{Self: m.cfg.ID, Now: time.Now().UTC().Format(time.RFC3339), Managers: m.Managers()}
	m.state.Read(func(s *fsm.State) {
		d.Status = s.Status()
		d.Buckets = s.BucketList("", "")
		d.Config = s.Config()
	})
	d.Status.Leader, _, _ = m.Leader()
	if len(d.Buckets) > pageBuckets {
		d.More = len(d.Buckets) - pageBuckets
		d.Buckets = d.Buckets[:pageBuckets]
	}
	names := make([]string, 0, len(d.Status.Sites))
	for n := range d.Status.Sites {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d.Sites = append(d.Sites, pageSite{Name: n, SiteStatus: d.Status.Sites[n]})
	}
	if d.Config.Multisite() {
		d.RF, d.SF = d.Config.SiteReplicationFactor.String(), d.Config.SiteSearchFactor.String()
	} else {
		d.RF, d.SF = "RF="+strconv.Itoa(d.Config.ReplicationFactor), "SF="+strconv.Itoa(d.Config.SearchFactor)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := pageTmpl.Execute(w, d); err != nil {
		m.log.Warn("render cluster page", "err", err)
	}
}
