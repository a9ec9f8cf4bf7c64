#pragma once
// The stand-in device: a GPU without a GPU, for testing every device path of the engine on a
// machine that has none (docs/gpu.md, "The stand-in device"). Its arithmetic is the CPU
// backend's, bit for bit; everything else behaves like the CUDA backend:
//   - its memory space is Device and it refuses views of pageable host memory (a kernel cannot
//     read them), and views that do not lie inside live device or pinned memory (freed, or
//     tagged with a space they are not in);
//   - its allocator follows cudaMalloc's rules (backend/device_rules.h: at most 256-byte
//     alignment) over a VRAM of a fixed size that runs out with the same error as a GPU's;
//   - ops run later, in order, on a stream thread of their own: results reach the host only
//     through read_f32 / copy / synchronize, and a failure inside an op surfaces at the next
//     of those, as a CUDA error does;
//   - its DeviceLink's copies complete late, on a thread per lane, and page-locking a range
//     that overlaps one already locked is refused as cudaHostRegister refuses it.
// `moeflow run|bench --backend standin` and the tests/gpu suite run through it.
#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "backend/device_link.h"

namespace moeflow {

// The stand-in's VRAM: its size (default 16 GiB, or MOEFLOW_STANDIN_VRAM bytes when set by the
// caller through set_standin_vram) and what is in use. Process-wide, like a GPU's memory:
// buffers outlive the backend that allocated them.
void set_standin_vram(uint64_t bytes);
uint64_t standin_vram_total();
uint64_t standin_vram_used();

// `threads`: CPU threads its arithmetic uses (a pool of its own: the engine's pool stays free
// for the host backend beside it, as beside a GPU).
std::unique_ptr<Backend> make_standin_backend(int threads);
std::unique_ptr<DeviceLink> make_standin_device_link();

// What a stand-in backend and its links did, for tests and `bench --json`: how often the host
// waited for the device, how many ops ran, what was copied.
struct StandInCounts {
  uint64_t ops = 0;      // ops run on the stream
  uint64_t syncs = 0;    // host waits for the stream (synchronize, read_f32, copies to host)
  uint64_t uploads = 0;  // host -> device copies by the backend (weights, activations)
  uint64_t upload_bytes = 0;
  uint64_t lane_copies = 0;  // DeviceLink copies (the expert cache's)
  uint64_t lane_bytes = 0;
  uint64_t pins = 0;          // page-locked ranges granted
  uint64_t pins_refused = 0;  // refused because the range was locked already
};
// Process-wide totals (every stand-in backend and link); zeros when none was made.
StandInCounts standin_counts();
// What happened between two readings of standin_counts(), field by field.
StandInCounts operator-(const StandInCounts& later, const StandInCounts& earlier);

}  // namespace moeflow
