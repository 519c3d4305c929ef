package main

import (
	"fmt"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/spf13/cobra"

	"warden/internal/cli"
	"warden/pkg/dirlayout"
	"warden/pkg/metrics"
)

func newMetricsCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "metrics",
		Short: "The campaign's Prometheus metrics once, from the state database (after the controller ended)",
		Long: `metrics prints the campaign's metrics in the Prometheus text exposition
format, read from DIR/state.db opened read-only: the same families the
controller's --metrics listener and textfile serve, so the final state of a
campaign (complete, stopped) stays scrapeable after its controller exited
(for node_exporter's textfile collector: ctlq metrics -d DIR > FILE.prom.tmp
&& mv FILE.prom.tmp FILE.prom).

While a controller runs it holds the database: scrape its --metrics listener
or textfile instead; metrics then exits 2 naming the controller's pid. A
damaged or empty database exits 6, as ctlq status does.

Exit status: 0 printed; 6 the state database is damaged or empty; 2
anything else (a controller holds the campaign, not a campaign directory,
unreadable, bad usage).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := o.campaignDir()
			if err != nil {
				return err
			}
			st, err := openDatabase(dir, func(pid int) error {
				return fmt.Errorf("controller pid %d runs the campaign and holds %s: scrape its --metrics listener or textfile", pid, dirlayout.StateFile)
			})
			if err != nil {
				return err
			}
			defer st.Close()
			fams, err := metrics.Registry(st, time.Now).Gather()
			if err != nil {
				return &cli.ExitError{Code: exitOther, Err: fmt.Errorf("read the campaign's metrics: %w", err)}
			}
			enc := expfmt.NewEncoder(cmd.OutOrStdout(), expfmt.NewFormat(expfmt.TypeTextPlain))
			for _, f := range fams {
				if err := enc.Encode(f); err != nil {
					return &cli.ExitError{Code: exitOther, Err: err}
				}
			}
			return nil
		},
	}
}
