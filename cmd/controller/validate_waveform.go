package main

import (
	"github.com/spf13/cobra"

	"warden/pkg/contract"
)

func newValidateWaveformCmd() *cobra.Command {
	var dir string
	cmd := verdictCmd("waveform", "Check the streamed audio of a load client's run: samples, format and boundaries",
		`waveform checks the audio chunks a load client recorded (loadgen's
result.json and requests/*.jsonl, run with --modalities including audio) by
seed 000's waveform invariants: every chunk carries the samples its WAV
header declares; sample rate, channels and bits per sample never change
within a request; where the stream carries offsets, each chunk starts where
the samples before it end (no sample dropped or repeated at a boundary); a
request that breaks one is invalid-output in the records. A run that asked
for no audio, or a successful request without audio chunk records, is an
error: never a pass.`,
		func() (contract.Result, error) {
			if dir == "" {
				return contract.Result{}, usage("waveform: --result-dir DIR is required")
			}
			return contract.WaveformDir(dir), nil
		})
	f := cmd.Flags()
	resultDirFlag(f, &dir)
	return cmd
}
