package report

// reportTemplate is the report page: everything inline, nothing fetched.
// The Content-Security-Policy forbids every request the page could make,
// so a mistake shows as a console error instead of a silent fetch.
const reportTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Warden report: {{.Rep.Status.Campaign.ID}}</title>
<link rel="icon" href="data:,">
<style>
:root { --fg:#1d2330; --muted:#6b7280; --line:#d9dde3; --bg:#ffffff; --head:#f4f6f9; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); margin: 0 auto; max-width: 1180px; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.muted { color: var(--muted); }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 10px 0; }
.kv dt { color: var(--muted); } .kv dd { margin: 0; }
.state { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-weight: 600; }
.state.running { background: #3a78d4; } .state.complete { background: #2e9d57; } .state.stopped { background: #d24a43; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; }
table { border-collapse: collapse; width: 100%; font-size: 12.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: var(--head); position: sticky; top: 0; cursor: pointer; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.hl td { background: #fff6d6; }
tr.group-row td { background: #f9fafb; white-space: normal; }
.dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; margin-right: 5px; vertical-align: middle; }
svg.chart { display: block; margin: 6px 0; }
svg .grid { stroke: #eceff3; } svg .tick { font-size: 10px; fill: var(--muted); } svg .label { font-size: 11px; fill: var(--fg); }
svg .bar { font-size: 10px; fill: #fff; pointer-events: none; }
td { white-space: nowrap; } td.wrap { white-space: normal; }
svg .phase { stroke: rgba(255,255,255,.85); stroke-width: 1.2; }
svg .att rect:hover { stroke: #000; stroke-width: 1.2; }
svg .charged { fill: none; stroke: #d24a43; stroke-width: 2; } svg .reserved { fill: none; stroke: #e0a020; stroke-width: 1.2; stroke-dasharray: 4 3; }
svg .cap { stroke: #1d2330; stroke-width: 1.2; stroke-dasharray: 6 4; }
svg .axis { stroke: #9aa1ab; } svg .bound { stroke: #d24a43; stroke-width: 1.2; stroke-dasharray: 5 3; }
svg .front { fill: none; stroke: #1d2330; stroke-width: 1.3; stroke-dasharray: 6 3; } svg .front-pt { fill: none; stroke: #1d2330; stroke-width: 1.3; }
svg .whisker { stroke-width: 1.2; }
.key i.front-key { border-top: 2px dashed #1d2330; height: 0; background: none; }
.grid2 { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 4px 16px; } .grid2 svg.chart { width: 100%; height: auto; }
.missing { color: #b06d00; font-style: italic; }
h3.group, h3.curve-name { font-size: 14px; margin: 14px 0 4px; }
.legend { font-size: 12px; color: var(--muted); } .key { margin-right: 14px; } .key i { display: inline-block; width: 12px; height: 10px; margin-right: 4px; vertical-align: middle; }
.bad { color: #d24a43; font-weight: 600; }
#tip { position: fixed; pointer-events: none; background: #1d2330; color: #fff; padding: 6px 8px; border-radius: 4px; font: 12px/1.35 ui-monospace, monospace; white-space: pre; display: none; z-index: 5; }
@media print { body { max-width: none; padding: 0; } th { position: static; } #tip { display: none !important; } h2 { break-after: avoid; } svg.chart, tr { break-inside: avoid; } }
</style>
</head>
<body>
{{- $c := .Rep.Status.Campaign}}
<h1>{{$c.Protocol}} <span class="muted">campaign {{$c.ID}}</span></h1>
<div><span class="state {{$c.State}}">{{$c.State}}</span>{{if and (eq $c.State "running") (not .Rep.Status.Controller.Alive)}} <span class="bad">no controller runs it (crashed or killed): controller resume -d {{$c.Dir}}</span>{{end}}{{if $c.StopReason}} <span class="bad">stop reason {{$c.StopReason}}</span>: {{$c.StopDetail}}{{end}}</div>
{{- if $c.FakeGPUs}}
<div id="fake-gpus" class="bad">FAKE GPUs: this campaign ran on file-backed fake GPUs (--gpu-backend fake). No figure in this report is a GPU's.</div>
{{- end}}
<dl class="kv">
<dt>protocol sha256</dt><dd class="mono">{{$c.SHA256}}</dd>
{{- if .Plan}}{{if .Plan.Protocol.Title}}<dt>title</dt><dd>{{.Plan.Protocol.Title}}</dd>{{end}}{{if .Plan.Protocol.Frozen}}<dt>frozen</dt><dd>{{.Plan.Protocol.Frozen}}</dd>{{end}}{{end}}
<dt>directory</dt><dd class="mono">{{$c.Dir}}</dd>
<dt>created</dt><dd>{{time $c.CreatedAt}}</dd>
<dt>regime</dt><dd>{{$c.Regime}}</dd>
<dt>GPU backend</dt><dd>{{$c.GPUBackend}}</dd>
<dt>runs</dt><dd>{{.Rep.Status.Runs.Total}}: {{range $k, $v := .Rep.Status.Runs.ByState}}{{$k}} {{$v}} &nbsp;{{end}}</dd>
<dt>budget</dt><dd>{{printf "%.3f" .Rep.Status.Budget.ChargedGPUHours}} charged, {{printf "%.3f" .Rep.Status.Budget.ReservedGPUHours}} reserved of the cap {{printf "%.3f" .Rep.Status.Budget.CapGPUHours}} {{.Unit}}</dd>
<dt>report generated</dt><dd>{{time .Rep.GeneratedAt}} (from the {{.Rep.Status.Source}})</dd>
</dl>
<h2 id="quality">Configuration and quality gates</h2>
<p class="muted">Every run, with the verdicts of its validators (the quality gates). A run that failed its quality gate (quality-failed), and every other run of its system, is kept here and left out of the performance ranking (seed 000 §4, §14).</p>
<table id="quality-gates">
<thead><tr><th>run</th><th>phase</th><th>system</th><th>cell</th><th>load</th><th>state</th><th>quality gates</th><th>ranked</th></tr></thead>
<tbody>
{{- range .Quality}}
<tr data-run="{{.Run}}"><td class="mono">{{.Run}}</td><td>{{.Phase}}</td><td>{{.System}}</td><td>{{.Cell}}</td><td>{{.Load}}</td><td>{{.State}}{{if .Reason}} <span class="muted">({{.Reason}})</span>{{end}}</td><td class="wrap">{{join .Validators ", "}}</td><td class="wrap">{{if .Ranked}}yes{{else}}<span class="bad">no: {{.Excluded}}</span>{{end}}</td></tr>
{{- end}}
</tbody>
</table>

<h2 id="performance">Performance</h2>
<p class="muted">The ranked runs only (complete, measured, of a system that passed its quality gates), by group (phase, load and the axes that do not choose the server: a pattern, a concurrency), so that the rank is over the group's configurations (the values of the axes that choose the server: a system, a server config; "over" names them), each group by the first figure every run of it has: p99 time to first audio, else p99 time to first token (lower first), else throughput (higher first). Repeats are ranked run by run; their means are under Repeats.</p>
{{if .Performance}}<table id="performance-ranking">
<thead><tr><th>rank</th><th>run</th><th>system</th><th>config</th><th>throughput req/s</th><th>p99 TTFT ms</th><th>p99 TPOT ms</th><th>p99 ITL ms</th><th>p99 E2E ms</th><th>p99 TTFA ms</th><th>p99 RTF</th><th>p99 chunk gap ms</th><th>energy J/req</th></tr></thead>
<tbody>
{{- $group := ""}}
{{- range .Performance}}
{{- if ne .Group $group}}{{$group = .Group}}
<tr class="group-row" data-group="{{.Group}}"><td colspan="13"><b>{{.Group}}</b>: {{if .RankedBy}}ranked by {{.RankedBy}}{{else}}not ranked (no figure every run has){{end}} over {{.RankedOver}}</td></tr>
{{- end}}
<tr data-run="{{.Run}}"><td class="num">{{if .Rank}}{{.Rank}}{{else}}–{{end}}</td><td class="mono">{{.Run}}</td><td>{{.System}}</td><td>{{.Config}}</td><td class="num">{{f3 .ThroughputRPS}}</td>{{ms3 .TTFTP99MS}}{{ms3 .TPOTP99MS}}{{ms3 .ITLP99MS}}{{ms3 .E2EP99MS}}<td class="num">{{f3 .TTFAP99MS}}</td><td class="num">{{f3 .RTFP99}}</td><td class="num">{{f3 .ChunkGapP99MS}}</td><td class="num">{{f3 .EnergyPerRequestJ}}</td></tr>
{{- end}}
</tbody>
</table>{{else}}<p class="muted">No run is ranked.</p>{{end}}
{{- if .NotRanked}}
<h3 style="font-size:14px;margin:12px 0 0">Not ranked: figures kept</h3>
<p class="muted">Runs left out of the ranking, with their figures (seed 000 §4: a quality-failed run's latency, failures and resources are still reported). They are no part of any comparison.</p>
<table id="not-ranked">
<thead><tr><th>run</th><th>system</th><th>why not ranked</th><th>throughput req/s</th><th>p99 TTFT ms</th><th>p99 TTFA ms</th><th>p99 RTF</th><th>p99 chunk gap ms</th><th>energy J/req</th></tr></thead>
<tbody>
{{- range .NotRanked}}
<tr data-run="{{.Run}}"><td class="mono">{{.Run}}</td><td>{{.System}}</td><td class="bad">{{.Excluded}}</td><td class="num">{{f3 .ThroughputRPS}}</td>{{ms3 .TTFTP99MS}}<td class="num">{{f3 .TTFAP99MS}}</td><td class="num">{{f3 .RTFP99}}</td><td class="num">{{f3 .ChunkGapP99MS}}</td><td class="num">{{f3 .EnergyPerRequestJ}}</td></tr>
{{- end}}
</tbody>
</table>
{{- end}}

<h2 id="curves">Throughput against latency</h2>
<p class="muted">Per phase and workload (the runs that read the same manifest), one line per configuration through its loads, in order of throughput: clean-interval requests/s against <b>{{.CurveLatency}}</b>, each point the mean over the configuration's repeats, with its 95% confidence interval where it has two or more. {{if eq .CurveLatency "ttft_p99_ms"}}p99 TTFT by default: it grows with the queueing a busier configuration causes, which is what its throughput costs a user, and an SLO is written on the tail a mean hides; <code>ctlq report --latency tpot_p99_ms</code> (or any latency of the table) draws another.{{else}}Chosen with <code>ctlq report --latency</code>.{{end}} The dashed line is the Pareto front: the points no other point of the curve beats on both throughput (higher) and {{.CurveLatency}} (lower), ringed.</p>
{{- range $i, $c := .Curves}}
<h3 class="curve-name">{{$c.Label}}</h3>
{{$c.SVG}}
<table id="curve-{{$i}}" class="curve-points">
<thead><tr><th>config</th><th>load</th><th>runs</th><th>throughput req/s</th><th>{{$c.Latency}}</th><th>95% CI</th><th>Pareto front</th></tr></thead>
<tbody>
{{- range $c.Series}}{{range .Points}}
<tr><td>{{.Config}}</td><td>{{.Load}}</td><td class="mono">{{join .Runs ", "}}</td><td class="num">{{printf "%.3f" .ThroughputRPS}}</td><td class="num">{{printf "%.3f" .LatencyMS}}</td><td class="num">{{if .LatencyCI95Low}}{{f3 .LatencyCI95Low}} – {{f3 .LatencyCI95High}}{{else}}–{{end}}</td><td>{{if onFront $c .}}<b>on the front</b>{{else}}dominated{{end}}</td></tr>
{{- end}}{{end}}
</tbody>
</table>
<table id="pareto-{{$i}}" class="pareto" style="margin-top:8px">
<thead><tr><th>Pareto front, by throughput</th><th>load</th><th>throughput req/s</th><th>{{$c.Latency}}</th></tr></thead>
<tbody>
{{- range $c.Front}}
<tr><td>{{.Config}}</td><td>{{.Load}}</td><td class="num">{{printf "%.3f" .ThroughputRPS}}</td><td class="num">{{printf "%.3f" .LatencyMS}}</td></tr>
{{- end}}
</tbody>
</table>
{{- range $c.Missing}}<p class="bad">not on the curve: {{.}}</p>{{end}}
{{- else}}
<p class="muted">No ranked run: no curve.</p>
{{- end}}

<h2 id="repeats">Repeats</h2>
{{if .Spread.Rows}}<p class="muted">Each configuration's runs that differ only in their repeat (the phases' <code>repeats:</code>; an A/A pair is such a configuration): each figure's mean over them ± the half-width of its 95% confidence interval (Student's t, repeats − 1 degrees of freedom), the sample standard deviation, the half-width as a share of the mean and, in brackets, the repeats that have the figure (–: fewer than two). Every figure's spread (p50s and output tokens/s too) is in <code>--configs-csv</code> and <code>--table-json</code>.</p>
<table id="spread">
<thead><tr><th>group</th><th>config</th><th>runs</th>{{range .Spread.Keys}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Spread.Rows}}
<tr><td>{{.Group}}</td><td>{{.Config}}</td><td class="mono wrap">{{join .Runs ", "}}</td>{{range .Cells}}{{spread .}}{{end}}</tr>
{{- end}}
</tbody>
</table>{{else}}<p class="muted">No ranked configuration has two or more repeats with figures: no spread to show (a phase's <code>repeats:</code> runs each cell more than once).</p>{{end}}

<h2 id="latency">Latency distributions</h2>
<p class="muted">Each ranked run's TTFT, TPOT, ITL and E2E over its clean interval, from its client's result.json (loadgen's nearest-rank quantiles, milliseconds; <code>missing</code>: the result does not give the figure, hover for why), by group as the ranking compares them. The CDFs pass through each run's p50, p90, p95, p99 and max (quantiles 0.5, 0.9, 0.95, 0.99, 1; the lines between them are drawn, not measured), on a log scale, coloured by configuration. Every figure, p95 and max included, is in <code>--csv</code> and <code>--table-json</code>.</p>
{{- range $i, $g := .Dists}}
<h3 class="group">{{$g.Group}}</h3>
<table id="latency-{{$i}}" class="latency">
<thead><tr><th rowspan="2">run</th><th rowspan="2">config</th><th colspan="4">TTFT ms</th><th colspan="4">TPOT ms</th><th colspan="4">ITL ms</th><th colspan="4">E2E ms</th></tr>
<tr>{{range $m := $.LatencyMetrics}}<th>mean</th><th>p50</th><th>p90</th><th>p99</th>{{end}}</tr></thead>
<tbody>
{{- range $g.Rows}}
<tr data-run="{{.Run}}"{{if .Latency.Missing}} title="{{join .Latency.Missing "; "}}"{{end}}><td class="mono">{{.Run}}</td><td>{{.Config}}</td>{{$l := .Latency}}{{range $m := $.LatencyMetrics}}{{lat $l $m.Key "mean"}}{{lat $l $m.Key "p50"}}{{lat $l $m.Key "p90"}}{{lat $l $m.Key "p99"}}{{end}}</tr>
{{- end}}
</tbody>
</table>
<div class="grid2">{{range $g.Charts}}<div>{{.}}</div>{{end}}</div>
{{- else}}
<p class="muted">No ranked run: nothing to compare.</p>
{{- end}}

<h2>Amendments</h2>
{{if .Rep.Amendments}}<ul>{{range .Rep.Amendments}}<li><b>{{.ID}}</b> {{.Kind}}{{if .Date}} ({{.Date}}){{end}}: {{.Title}}{{if ne .Text .Title}} {{.Text}}{{end}}{{if .Runs}} <span class="muted">runs {{join .Runs ", "}}</span>{{end}} <span class="muted mono">{{short .ProtocolSHA256}}</span></li>{{end}}</ul>{{else}}<p class="muted">None registered.</p>{{end}}

<h2>Attempts per GPU</h2>
<div class="legend"><span class="key"><i style="background:#2e9d57"></i>complete</span><span class="key"><i style="background:#e0a020"></i>quarantined</span><span class="key"><i style="background:#d24a43"></i>failed</span><span class="key"><i style="background:#8a8f98"></i>interrupted</span><span class="key"><i style="background:#3a78d4"></i>in flight</span> white ticks: ready, measuring, stopping. Hover a bar for its run, states and times; click it to find its row.</div>
{{.Timeline}}

<h2>Budget over time</h2>
<div class="legend"><span class="key"><i style="background:#d24a43"></i>charged (with prior consumption)</span><span class="key"><i style="background:#e0a020"></i>charged + reserved</span><span class="key"><i style="background:#1d2330"></i>cap</span> ({{.Unit}})</div>
{{.Budget}}

<h2>Runs</h2>
<table id="runs">
<thead><tr><th>run</th><th>phase</th><th>kind</th><th>cell</th><th>state</th><th>attempts</th><th>gates</th><th>duration s</th><th>throughput req/s</th><th>output tok/s</th><th>energy J/req</th><th>GPU s</th></tr></thead>
<tbody>
{{- range .Rows}}
<tr data-run="{{.Run}}"><td class="mono">{{.Run}}{{if .Measured}} <span class="muted">measured</span>{{end}}</td><td>{{.Phase}}</td><td>{{.Kind}}</td><td>{{.Cell}}</td>
<td><span class="dot" style="background:{{colour .State}}"></span>{{.State}}{{if .Reason}} <span class="muted">({{.Reason}})</span>{{end}}</td>
<td class="num">{{.Attempts}}</td>
<td class="wrap">{{if .Attempt}}{{.GatesPassed}} passed{{if .GatesNotPassed}}; <span class="bad">{{join .GatesNotPassed ", "}}</span>{{end}}{{if .DamagedEvidence}}; <span class="bad">{{join .DamagedEvidence ", "}}</span>{{end}}{{else}}–{{end}}</td>
<td class="num">{{f3 .DurationS}}</td><td class="num">{{f3 .ThroughputRPS}}</td><td class="num">{{f3 .OutputTokensPerS}}</td><td class="num">{{f3 .EnergyPerRequestJ}}</td><td class="num">{{f3 .GPUSeconds}}</td></tr>
{{- end}}
</tbody>
</table>
{{- if .Stderr}}

<h2>Failed processes' stderr</h2>
<p class="muted">The last lines (at most 20 within 4 KiB) of each failed attempt's client or server that exited non-zero or was killed.</p>
{{- range .Stderr}}
<h3 style="font-size:14px;margin:12px 0 0"><span class="mono">{{.Run}}</span> attempt {{.Attempt}} {{.Role}} <span class="muted mono">{{.File}}</span></h3>
{{if .Note}}<p class="muted">{{.Note}}</p>{{else}}<pre class="mono">{{join .Lines "\n"}}</pre>{{end}}
{{- end}}
{{- end}}

{{if .Capacity}}<h2>Capacity searches</h2>
<p class="muted">Each search's judged points on the arrival-rate axis (above: the SLO held; below: it did not; grey: it could not be judged), and the rate found: the largest that held, to the search's resolution, as the controller decided from the same records. Below it, each figure the SLO bounds against the offered rate, through the points in order of rate (green held, red did not), with the bound dashed.</p>
{{- range .Capacity}}
<h3 style="font-size:14px;margin:12px 0 0" class="capacity-search"><span class="mono">{{.Search}}</span>: {{if gt .Found 0.0}}found <span class="num">{{printf "%.4g" .Found}}</span> requests/s{{else if .Stop}}stopped ({{.Stop}}){{else}}searching{{end}}{{if .NotMonotonic}}: <strong class="not-a-capacity">not a capacity</strong>: {{.NotMonotonic}}{{end}}</h3>
{{.SVG}}
<div class="grid2">{{range .Curves}}<div>{{.}}</div>{{end}}</div>
<table><thead><tr><th>point</th><th>rate (requests/s)</th><th>SLO</th><th>detail</th></tr></thead><tbody>
{{- range .Points}}
<tr><td class="mono">{{.Run}}</td><td class="num">{{printf "%.4g" .Rate}}</td><td>{{.Verdict}}</td><td>{{.Detail}}</td></tr>
{{- end}}
</tbody></table>
{{- end}}
{{- end}}

<h2>Layer-2 windows</h2>
{{if .Windows}}<table>
<thead><tr><th>run</th><th>attempt</th><th>verdict of</th><th>window</th><th>rank</th><th>family shares</th><th>other + opaque</th><th>join</th><th>max |SMD|</th></tr></thead>
<tbody>
{{- range .Windows}}
<tr><td class="mono">{{.Run}}</td><td class="num">{{.Attempt}}</td><td class="mono">{{.Gate}}</td><td class="num">{{.Window}}</td><td class="num">{{.Rank}}</td><td>{{.Shares}}</td><td class="num{{if .Bad}} bad{{end}}">{{.OtherOpaque}}</td><td>{{.Join}}</td><td class="num">{{.SMD}}</td></tr>
{{- end}}
</tbody>
</table>{{else}}<p class="muted">No Layer-2 windows.</p>{{end}}

<h2>False-failure rates of the gates that judge a sample</h2>
{{if .SelfChecks}}<p class="muted">How often each run's literal representativeness and recovery rules fail its own representative data: C's own 8-step blocks against the rest of C, the clean segments' own rolling samples against C's medians (docs/validators.md). A verdict stands as its rule gave it; these say how much of it is noise.</p>
<table>
<thead><tr><th>run</th><th>attempt</th><th>verdict of</th><th>gate</th><th>rule</th><th>samples</th><th>literal pass, one unit</th><th>a representative run fails</th></tr></thead>
<tbody>
{{- range .SelfChecks}}
<tr><td class="mono">{{.Run}}</td><td class="num">{{.Attempt}}</td><td class="mono">{{.Gate}}</td><td>{{.Measure}}</td><td>{{.Rule}}</td><td class="num">{{.Samples}}</td><td class="num">{{.UnitPass}}</td><td class="num{{if .High}} bad{{end}}">{{.RunFail}}</td></tr>
{{- end}}
</tbody>
</table>{{else}}<p class="muted">No gate measured its own false-failure rate.</p>{{end}}

<h2>GPU traces</h2>
{{if .Traces}}{{range .Traces}}<h3 style="font-size:14px;margin:12px 0 0">{{.Title}}</h3>{{.SVG}}{{end}}{{else}}<p class="muted">No GPU samples.</p>{{end}}

<h2>Sanity</h2>
{{range .Notes}}<p>{{.}}</p>{{end}}
<table>
<thead><tr><th>attempt</th><th>load1 before</th><th>load1 after</th><th>other users' procs before / after</th><th>samples</th><th>missed</th><th>slowest read ms</th></tr></thead>
<tbody>
{{- range .Sanity}}
<tr><td class="mono">{{.Attempt}}</td><td class="num">{{.PreLoad}}</td><td class="num">{{.PostLoad}}</td><td class="num{{if .Flag}} bad{{end}}">{{.OtherProcs}}</td><td class="num">{{.Samples}}</td><td class="num{{if .Flag}} bad{{end}}">{{.Missed}}</td><td class="num">{{.ReadMaxMS}}</td></tr>
{{- end}}
</tbody>
</table>
<div id="tip"></div>
<script>
(function () {
  "use strict";
  var tip = document.getElementById("tip");
  document.querySelectorAll("svg .att").forEach(function (g) {
    var t = g.querySelector("title");
    var text = t ? t.textContent : "";
    if (t) { g.setAttribute("data-tip", text); t.remove(); }
    g.addEventListener("mousemove", function (e) {
      tip.textContent = text; tip.style.display = "block";
      tip.style.left = (e.clientX + 14) + "px"; tip.style.top = (e.clientY + 14) + "px";
    });
    g.addEventListener("mouseleave", function () { tip.style.display = "none"; });
    g.addEventListener("click", function () {
      var row = document.querySelector('#runs tr[data-run="' + CSS.escape(g.getAttribute("data-run")) + '"]');
      if (!row) { return; }
      document.querySelectorAll("#runs tr.hl").forEach(function (r) { r.classList.remove("hl"); });
      row.classList.add("hl"); row.scrollIntoView({block: "center"});
    });
  });
  document.querySelectorAll("#runs th").forEach(function (th, i) {
    th.addEventListener("click", function () {
      var body = document.querySelector("#runs tbody");
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
      th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
      rows.sort(function (a, b) {
        var x = a.cells[i].textContent.trim(), y = b.cells[i].textContent.trim();
        var nx = parseFloat(x), ny = parseFloat(y);
        if (!isNaN(nx) && !isNaN(ny)) { return (nx - ny) * dir; }
        return x.localeCompare(y) * dir;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  document.body.setAttribute("data-height", String(document.documentElement.scrollHeight));
  document.body.setAttribute("data-ready", "1");
})();
</script>
</body>
</html>
`
