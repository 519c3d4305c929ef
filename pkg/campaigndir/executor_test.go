package campaigndir

import (
	"strings"
	"testing"

	"warden/pkg/slurm"
	"warden/protocols"
)

func TestResolveExecutor(t *testing.T) {
	proto := &protocols.Plan{Executor: protocols.ExecutorInfo{Kind: "slurm", Slurm: &protocols.SlurmInfo{
		Partition: "gpu", Account: "lab", Exclusive: true, QueueTimeoutS: 1800, Nodes: 2}}}
	defaults := slurm.Options{QueueTimeoutS: slurm.DefaultQueueTimeoutS}

	// the protocol's section where the command line says nothing
	var so StartOptions
	if err := ResolveExecutor(&so, ExecutorChoice{Executor: "local", Slurm: defaults}, proto, "fake", "/opt/controller"); err != nil {
		t.Fatal(err)
	}
	if so.Executor != "slurm" || so.Slurm == nil || so.Slurm.Partition != "gpu" || !so.Slurm.Exclusive || so.Slurm.QueueTimeoutS != 1800 || so.Slurm.NodeController != "/opt/controller" {
		t.Errorf("from the protocol: %q %+v", so.Executor, so.Slurm)
	}
	// a flag given wins: the partition, and --executor local
	so = StartOptions{}
	ch := ExecutorChoice{Executor: "slurm", Slurm: slurm.Options{Partition: "debug", QueueTimeoutS: 600}, Given: map[string]bool{"partition": true}}
	if err := ResolveExecutor(&so, ch, proto, "nvml", "/opt/controller"); err != nil || so.Slurm.Partition != "debug" || so.Slurm.Account != "lab" {
		t.Errorf("flag over protocol: %+v, %v", so.Slurm, err)
	}
	so = StartOptions{}
	if err := ResolveExecutor(&so, ExecutorChoice{Executor: "local", Given: map[string]bool{"executor": true}}, proto, "fake", "/x"); err != nil || so.Executor != "" || so.Slurm != nil {
		t.Errorf("--executor local over a Slurm protocol: %q %+v %v", so.Executor, so.Slurm, err)
	}
	// refusals, each naming what is wrong
	for _, c := range []struct {
		name    string
		ch      ExecutorChoice
		backend string
		self    string
		want    string
	}{
		{"unknown executor", ExecutorChoice{Executor: "k8s"}, "fake", "/x", "local or slurm"},
		{"auto backend", ExecutorChoice{Executor: "slurm", Slurm: defaults}, "auto", "/x", "--gpu-backend nvml or fake"},
		{"no queue bound", ExecutorChoice{Executor: "slurm"}, "fake", "/x", "--slurm-queue-timeout must be positive"},
		{"relative binary", ExecutorChoice{Executor: "slurm", Slurm: defaults}, "fake", "bin/controller", "absolute path"},
	} {
		so := StartOptions{}
		err := ResolveExecutor(&so, c.ch, nil, c.backend, c.self)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
