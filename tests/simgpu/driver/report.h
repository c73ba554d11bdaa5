// The exit report (SIMGPU_REPORT=1): one block on stderr with the model, virtual
// time, peak device memory and the counters.
#ifndef SIMGPU_DRIVER_REPORT_H
#define SIMGPU_DRIVER_REPORT_H

namespace simgpu {

void print_report_if_asked();

}  // namespace simgpu

#endif  // SIMGPU_DRIVER_REPORT_H
