// Package nvmlgpu reads GPUs through NVML (github.com/NVIDIA/go-nvml, cgo).
// Open takes an nvml.Interface: the real library (nil), or a mock server in
// tests.
//
// Invariants:
//
//   - Every method that calls NVML runs the calls off the caller's goroutine
//     under the Backend's deadline. A call past its deadline returns
//     ErrTimeout; its goroutine ends when NVML returns.
//   - While such an abandoned call has not returned, every further call is
//     refused at once with ErrTimeout, without calling NVML: a lost GPU then
//     costs one stuck goroutine, not one per sample.
//   - A field whose NVML call answers ERROR_NOT_SUPPORTED (or
//     ERROR_FUNCTION_NOT_FOUND) is absent from the reading; any other error
//     fails the read, wrapped with the nvml.Return (errors.Is works on it).
//   - A Backend holds no mutable state other than the count of abandoned
//     calls; its methods are safe for concurrent use.
//
// Caveats:
//
//   - One deadline covers one read of all its GPUs, not each NVML call.
//   - GetTotalEnergyConsumption costs 3.5-3.9 ms per GPU on an H200, against
//     microseconds for the Fast fields: Sample leaves it out, Energy reads
//     only it.
//   - NUMANode comes from sysfs (bus/pci/devices/<bus id>/numa_node), since
//     NVML's GetNumaNodeId is not supported on x86 H200 hosts.
//   - Process uids are read from /proc/PID/status of this pid namespace; a
//     process NVML lists but this namespace cannot see gets uid -1.
package nvmlgpu
