// Command standin is a STAND-IN for an inference server and for a benchmark
// load client, for Warden's tests and demo on hosts without a GPU. It is not
// an inference server and not a benchmark client: it generates placeholder
// tokens on a timer and measures nothing about any model.
//
// It behaves like vLLM as a process, which is what Warden has to manage:
//
//	standin server   an API parent that re-executes itself as an engine child
//	                 in the same process group; the engine claims fake GPU
//	                 memory (package fakegpu) that is released when it dies.
//	                 GET /health, GET /v1/models, POST /v1/completions
//	                 (OpenAI-shaped, streaming or not). SIGTERM to the parent
//	                 drains in-flight requests up to --shutdown-timeout, tells
//	                 the engine to exit, waits for it, and exits 0.
//	standin client   a closed-loop load client with warm-up, clean (measured)
//	                 and drain phases, reported as JSON lines to a phase file,
//	                 and a result.json without prompts or generated text.
//
// Misbehaviour flags (--ignore-sigterm, --crash-after, --setsid-grandchild,
// --hold-port, --never-healthy, --engine-survives, --fork; client --hang,
// --fail, --drain-extra-s) reproduce what real servers and clients do wrong,
// so that the controller's gates can be tested against them.
//
// Real-server behaviours (--server-kind, --profiler-step-s,
// --profiler-reused, --reasoning-tokens, --idle-timeout-s,
// --max-running-requests, the Omni kinds' --audio-* streams) follow vLLM's,
// SGLang's and their Omni servers' source, cited in docs/servers.md.
//
// Exit codes: 0 success; 1 failure (including --crash-after); 2 client
// --fail after warm-up.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"warden/internal/cli"
)

func main() {
	os.Exit(cli.Run(newRootCmd(), 1, func(_ *cobra.Command, _ error, s cli.Status) {
		fmt.Fprintf(os.Stderr, "standin: %v\n", s.Cause)
	}))
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "standin",
		Short: "STAND-IN inference server and load client for Warden's tests and demos",
		Long: `standin is a STAND-IN for an inference server (like vLLM) and a benchmark load
client, for Warden's tests and demos on hosts without a GPU. It is NOT a real
inference server and NOT a real benchmark client: it returns placeholder tokens
on a timer and its figures say nothing about any model or GPU.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newServerCmd(), newClientCmd(), newEngineCmd(),
		newSleeperCmd(), newEscapeCmd(), newOrphanCmd(), newEvaluateCmd(), newImpostorCmd())
	return root
}

// newLogger returns the log of a stand-in process, naming its role.
func newLogger(role string) *logger {
	return &logger{zerolog.New(os.Stderr).With().Timestamp().Str("standin", role).Int("pid", os.Getpid()).Logger()}
}

// logger is the stand-in's log: JSON lines on its standard error, through
// zerolog as every Warden binary logs; a message takes key-value pairs
// after it. (What the stand-in prints in a real server's own formats, its
// startup and step lines, is written apart from it.)
type logger struct{ z zerolog.Logger }

// Info logs msg with the fields kv (key, value, key, value, ...).
func (l *logger) Info(msg string, kv ...any) { l.z.Info().Fields(kv).Msg(msg) }

// Warn logs msg as a warning with the fields kv.
func (l *logger) Warn(msg string, kv ...any) { l.z.Warn().Fields(kv).Msg(msg) }

// seconds converts a flag value in seconds to a duration.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second))
}
