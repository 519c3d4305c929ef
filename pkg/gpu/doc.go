// Package gpu holds what every GPU backend reports: a Reading of one GPU at
// one moment, the Fields a read asks for, the decoding of clock-event
// reasons and the Linux CPU-list format. It does no I/O and needs no cgo, so
// packages that only consume readings (the sampler, the query tool) do not
// link NVML.
//
// Invariants:
//
//   - A field a read did not ask for, or that the device does not support
//     (NVML's ERROR_NOT_SUPPORTED), is absent: a nil pointer or slice. Absent
//     never means zero; zero is a measured value.
//   - Index and UUID are always present in a reading. NUMANode is -1 when
//     it is not known (and when Topology was not asked for).
//   - Units are in the field names: MiB, MHz, W, C (degrees Celsius), MJ
//     (millijoules, as NVML counts them).
//
// Caveats:
//
//   - EnergyMJ is a counter since an arbitrary origin (driver load for NVML,
//     the first read for the fake): only differences between two reads of
//     the same GPU mean anything.
//   - Reading an energy counter through NVML costs milliseconds per GPU, two
//     orders of magnitude more than the other fields; read it at the
//     boundaries of an interval and sample the Fast fields in between.
package gpu
