package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/api"
	"warden/pkg/dirlayout"
	"warden/pkg/report"
)

// exitPrivate is report's exit status when its output would hold private
// text, or the private inputs cannot be read to tell.
const exitPrivate = 7

func newReportCmd(o *options) *cobra.Command {
	var file, tableJSON, csvFile, configsCSV, capacityCSV, latency string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "One self-contained HTML report of the campaign, and its runs table as JSON and CSV",
		Long: `report writes one HTML file that needs nothing else (its CSS, script and
SVG charts are inline; it fetches nothing when opened) and prints well: the
protocol and its hash, state and stop reason; first the configuration and
quality gates (every run, its system, its validators' verdicts, and whether
it is ranked: a run that failed a quality gate, quality-failed, and every
other run of its system are not, seed 000 §4), then the performance ranking
(the complete, measured runs of the other systems, by group: phase, load
and the axes that do not choose the server, so that a group's
configurations (systems, server configs) are ranked against each other,
and the page says over what; by p99 time to first audio, else p99 time to
first token, else throughput), and the figures of the runs it leaves out,
each with why; the latency distributions of the ranked runs (TTFT, TPOT,
ITL, E2E: mean, p50, p90, p99, and a CDF through the quantiles, by group);
the throughput-latency curves (per phase and manifest, a line per
configuration through its loads, means over repeats with 95% confidence
intervals) with their Pareto fronts against --latency (default
ttft_p99_ms); the repeats' spread (mean, standard deviation, Student's t
interval); amendments; a timeline of every attempt per GPU, coloured by
outcome, with phase boundaries (hover for run, attempt, states and times);
the budget burned over time against the cap; the intervals no controller
ran the campaign (a dead controller's last heartbeat to the resume that
found it) shaded in the charts and named in the notes; the runs with
outcomes, gate and validator verdicts and key figures (throughput, energy
per request); the capacity searches (their points on the rate axis, and
each SLO figure against the rate with its bound); GPU power, memory and
clock traces from the samples; a sanity block (host load, other users'
processes, missed samples, failing gates); and the end of each failed
client's or server's stderr, as ctlq show prints it. A latency a run's
result does not give reads "missing", never 0. docs/report.md says what
each part shows and where it is read from.

-o FILE names the HTML file (default DIR/report.html, "-" for stdout);
--table-json and --csv write the runs table for analysis tools, with every
run's latency quantiles (the JSON also holds the two first tables, as
quality_gates and performance, the not-ranked runs' figures, as not_ranked,
the configurations, curves and capacity searches); --configs-csv writes the
configurations (means, spread, on_pareto_front), --capacity-csv the
capacity points. --latency names the latency of the curves and fronts, one
of ttft, tpot, itl, e2e with _mean_ms, _p50_ms, _p90_ms, _p95_ms, _p99_ms
or _max_ms, or ttfa_p99_ms, chunk_gap_p99_ms; another is refused (exit 2).
-o json and -o table are refused (exit 2), writing nothing: report has no
output format, and a file of that name is nearly always a mistake (write
./json to mean it). Its errors are plain text on stderr.

Nothing is written that holds private text: each document is searched, before
it is written, for every run of privacy.min_leak_bytes (default 48) bytes of
the campaign's private inputs (its provenance), as the privacy scan does; a
document that holds one, or private inputs that cannot be read, exit 7.

Exit status: 0 written; 7 a document would hold private text (or the
private inputs cannot be read to tell), nothing written; 6 the state
database is damaged or empty; 2 anything else (not a campaign directory,
unreadable, -o json or -o table, bad usage).`,
		Args: cobra.NoArgs,
		RunE: o.withSource(func(cmd *cobra.Command, _ []string, src *source) error {
			rep, err := src.report()
			if err != nil {
				return &cli.ExitError{Code: exitOther, Err: err}
			}
			plan, _ := dirlayout.ReadPlan(src.dir)
			priv, err := report.Privacy(src.dir, plan)
			if err != nil {
				return &cli.ExitError{Code: exitPrivate, Err: err}
			}
			if err := reportFileName(file); err != nil {
				return &cli.ExitError{Code: exitOther, Err: err}
			}
			opts := report.Options{Latency: latency}
			if err := report.CheckOptions(opts); err != nil {
				return &cli.ExitError{Code: exitOther, Err: err}
			}
			data := report.BuildWith(src.dir, rep, plan, opts)
			if file == "" {
				file = filepath.Join(src.dir, dirlayout.ReportFile)
			}
			for _, out := range []struct {
				path  string
				write func(io.Writer) error
			}{
				{file, func(w io.Writer) error { return report.WriteHTML(w, data) }},
				{tableJSON, func(w io.Writer) error { return writeJSON(w, data.Table()) }},
				{csvFile, func(w io.Writer) error { return report.WriteCSV(w, data.Rows) }},
				{configsCSV, func(w io.Writer) error { return report.WriteConfigsCSV(w, data) }},
				{capacityCSV, func(w io.Writer) error { return report.WriteCapacityCSV(w, data) }},
			} {
				if out.path == "" {
					continue
				}
				if err := report.Write(out.path, cmd.OutOrStdout(), priv, out.write); err != nil {
					var pe *report.PrivateError
					if errors.As(err, &pe) {
						return &cli.ExitError{Code: exitPrivate, Err: err}
					}
					return &cli.ExitError{Code: exitOther, Err: err}
				}
			}
			if file != "-" {
				fmt.Fprintln(cmd.ErrOrStderr(), "report written to", file)
			}
			return nil
		}),
	}
	cmd.Flags().StringVarP(&file, "output", "o", "", "HTML file to write (default DIR/report.html; - for stdout)")
	cmd.Flags().StringVar(&tableJSON, "table-json", "", "also write the runs table as JSON to this file")
	cmd.Flags().StringVar(&csvFile, "csv", "", "also write the runs table as CSV to this file")
	cmd.Flags().StringVar(&configsCSV, "configs-csv", "", "also write the configurations (means over repeats, spread, Pareto front) as CSV to this file")
	cmd.Flags().StringVar(&capacityCSV, "capacity-csv", "", "also write the capacity searches' points as CSV to this file")
	cmd.Flags().StringVar(&latency, "latency", report.DefaultLatency, "the latency the throughput-latency curves and Pareto fronts are drawn against (ttft_p99_ms, tpot_p99_ms, e2e_p90_ms, ...)")
	cmd.RegisterFlagCompletionFunc("latency", cobra.FixedCompletions(report.LatencyChoices(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (s *source) report() (api.Report, error) {
	return ask(s, 60*time.Second, func() (api.Report, error) {
		r, err := api.BuildReport(s.store, s.dir, s.controller(), time.Now())
		r.Status.Source = "database"
		return r, err
	}, s.client.Report)
}

// reportFileName refuses -o json and -o table: the other commands' output
// formats, which report's -o (a file) would take as a file name.
func reportFileName(file string) error {
	if file == "json" || file == "table" {
		return fmt.Errorf("report -o names the HTML file to write, not a format: refusing to write it to a file named %q (give ./%s to mean that file; --table-json FILE writes the runs table as JSON)", file, file)
	}
	return nil
}
