package main

import (
	"github.com/spf13/cobra"

	"warden/pkg/validate"
)

func newValidateWaveformCmd() *cobra.Command {
	var output, dir string
	cmd := &cobra.Command{
		Use:   "waveform",
		Short: "Check the streamed audio of a load client's run: samples, format and boundaries",
		Long: `waveform checks the audio chunks a load client recorded (loadgen's
result.json and requests/*.jsonl, run with --modalities including audio) by
seed 000's waveform invariants: every chunk carries the samples its WAV
header declares; sample rate, channels and bits per sample never change
within a request; where the stream carries offsets, each chunk starts where
the samples before it end (no sample dropped or repeated at a boundary); a
request that breaks one is invalid-output in the records. A run that asked
for no audio, or a successful request without audio chunk records, is an
error: never a pass.` + validateExit,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if dir == "" {
				return usage("waveform: --result-dir DIR is required")
			}
			return printVerdict(cmd.OutOrStdout(), "waveform", output, validate.WaveformDir(dir))
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "result-dir", "", "the client's result directory (holds result.json)")
	f.StringVarP(&output, "output", "o", "text", "output: text or json")
	return cmd
}
