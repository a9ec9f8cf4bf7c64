// The CUDA backend's memory side: device discovery, the stream and cuBLAS handle, weights
// adopted into VRAM once, copies between any two memory spaces, reads back to the host, staging
// of the small host arrays the MoE planner hands to ops, and the sync points that end a graph
// capture.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace moeflow {

namespace {

std::string no_device_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("{} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
  }
  if (n == 0) return "the CUDA runtime reports no device";
  return "";
}

}  // namespace

bool cuda_device_available() { return no_device_reason().empty(); }

std::string cuda_unavailable_reason() { return no_device_reason(); }

std::string cuda_device_description(int device) {
  const std::string why = no_device_reason();
  if (!why.empty()) fail("no CUDA device: {}", why);
  cudaDeviceProp p{};
  MOEFLOW_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  return fmt::format("{}, compute capability {}.{}, {:.1f} GiB, {} SMs", p.name, p.major, p.minor,
                     p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.multiProcessorCount);
}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& opt) {
  const std::string why = no_device_reason();
  if (!why.empty()) fail("no CUDA device: {}", why);
  return std::make_unique<cuda::CudaBackend>(opt);
}

CudaGraphCounts cuda_graph_counts(const Backend& b) {
  const auto* c = dynamic_cast<const cuda::CudaBackend*>(&b);
  if (!c) return {};
  const cuda::GraphStats& s = c->graph_stats();
  return {s.launches, s.instantiations, s.updates,
          s.ops,      c->sync_points(), c->host_registrations()};
}

namespace cuda {
namespace {

constexpr size_t kStageBytes = 1 << 20;        // host arrays staged between two sync points
constexpr size_t kBounceBytes = 32ull << 20;   // per bounce buffer of large uploads
constexpr size_t kPinThreshold = 64ull << 20;  // uploads this large first try to pin the source
constexpr size_t kCublasWorkspace = 32ull << 20;

bool graphs_from_env(bool dflt) {
  const char* e = std::getenv("MOEFLOW_CUDA_GRAPHS");
  if (!e || !*e) return dflt;
  return std::strcmp(e, "0") != 0;
}

cudaStream_t make_stream(int device) {
  MOEFLOW_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  MOEFLOW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

bool is_host(MemSpace s) { return s != MemSpace::Device; }

// True when the first and last byte of [p, p + n) are page-locked memory the device knows.
bool already_pinned(const void* p, size_t n) {
  auto pinned = [](const void* q) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, q) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return a.type == cudaMemoryTypeHost;
  };
  return pinned(p) && pinned(static_cast<const uint8_t*>(p) + n - 1);
}

void check_f32_rows(const TensorView& v, const char* op, const char* what) {
  if (v.type != GgmlType::F32)
    fail("cuda backend: {} needs a float32 {}, got {}", op, what, type_name(v.type));
  if (v.row_stride() % sizeof(float) != 0)
    fail("cuda backend: {}: the {}'s row stride {} is not a whole number of floats", op, what,
         v.row_stride());
}

}  // namespace

Mat mat(const TensorView& v) {
  return {v.as<float>(), v.rows(), v.cols(), (int64_t)(v.row_stride() / sizeof(float))};
}
CMat cmat(const TensorView& v) {
  return {v.as<const float>(), v.rows(), v.cols(), (int64_t)(v.row_stride() / sizeof(float))};
}

void* DeviceScratch::get(DeviceAllocator& a, size_t bytes) {
  if (buf.size() < bytes) {
    buf.reset();
    const size_t mib = 1 << 20;
    buf = a.allocate((std::max<size_t>(bytes, mib) + mib - 1) & ~(mib - 1));
  }
  return buf.data();
}

CudaBackend::CudaBackend(const CudaOptions& opt)
    : device_(opt.device),
      alloc_(DeviceAllocator::instance(opt.device)),
      stream_(make_stream(opt.device)),
      graphs_(stream_, graphs_from_env(opt.graphs)) {
  try {
    MOEFLOW_CUBLAS_CHECK(cublasCreate(&cublas_));
    MOEFLOW_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Full float32 products for float32 weights (no TF32), and a fixed workspace: cuBLAS then
    // never allocates by itself, which keeps it deterministic and out of the allocator's way.
    MOEFLOW_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    cublas_ws_ = alloc_.allocate(kCublasWorkspace);
    MOEFLOW_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_ws_.data(), cublas_ws_.size()));
    stage_host_ = PinnedHostAllocator::instance().allocate(kStageBytes);
    stage_dev_ = alloc_.allocate(kStageBytes);
    for (cudaEvent_t& e : bounce_done_)
      MOEFLOW_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } catch (...) {
    for (cudaEvent_t e : bounce_done_)
      if (e) (void)cudaEventDestroy(e);
    if (cublas_) (void)cublasDestroy(cublas_);
    (void)cudaStreamDestroy(stream_);
    throw;
  }
  alloc_.add_listener(this);
}

CudaBackend::~CudaBackend() {
  alloc_.remove_listener(this);
  graphs_.abort();
  (void)cudaStreamSynchronize(stream_);
  adopted_.clear();
  for (cudaEvent_t e : bounce_done_)
    if (e) (void)cudaEventDestroy(e);
  if (cublas_) (void)cublasDestroy(cublas_);
  (void)cudaStreamDestroy(stream_);
}

void CudaBackend::before_device_memory_change() {
  // No allocation inside a capture, and no free under work that still uses the memory. Only
  // the thread that issues ops may end its capture (captures are thread-local: another
  // thread's cudaMalloc does not touch it, and cudaFree waits for the device by itself); a
  // prefetcher allocating during a decode capture must leave the capture alone.
  const std::thread::id issuer = issuer_.load(std::memory_order_relaxed);
  if (issuer != std::thread::id() && issuer != std::this_thread::get_id()) return;
  graphs_.end();
  MOEFLOW_CUDA_CHECK(cudaStreamSynchronize(stream_));
  stage_used_ = 0;
}

void CudaBackend::sync_point() {
  ++sync_points_;
  graphs_.end();
  MOEFLOW_CUDA_CHECK(cudaStreamSynchronize(stream_));
  stage_used_ = 0;
}

void CudaBackend::synchronize() { sync_point(); }

const void* CudaBackend::stage(const void* src, size_t bytes) {
  const size_t need = (bytes + 255) & ~size_t(255);
  if (stage_used_ + need > stage_host_.size()) {
    sync_point();  // every earlier staged copy has landed: the ring starts over
    if (need > stage_host_.size()) {
      stage_host_ = PinnedHostAllocator::instance().allocate(need);
      stage_dev_ = alloc_.allocate(need);
    }
  }
  uint8_t* h = stage_host_.data() + stage_used_;
  uint8_t* d = stage_dev_.data() + stage_used_;
  std::memcpy(h, src, bytes);
  MOEFLOW_CUDA_CHECK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream_));
  stage_used_ += need;
  return d;
}

template <typename T>
HostArray<T> CudaBackend::host_array(std::span<const T> v) {
  HostArray<T> a;
  a.count = (int)v.size();
  if (v.size() <= (size_t)HostArray<T>::kInline)
    std::copy(v.begin(), v.end(), a.inl);
  else
    a.dev = static_cast<const T*>(stage(v.data(), v.size_bytes()));
  return a;
}
template HostArray<int32_t> CudaBackend::host_array(std::span<const int32_t>);
template HostArray<float> CudaBackend::host_array(std::span<const float>);
template HostArray<uint8_t> CudaBackend::host_array(std::span<const uint8_t>);

void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  graphs_.end();
  if (bytes >= kPinThreshold) {
    // A range page-locked already (a VRAM cache pins the file's expert span, which may cover
    // this tensor) is copied as it is: a second cudaHostRegister would be refused.
    std::optional<HostRegistration> pin;
    if (!already_pinned(src, bytes)) {
      ++registrations_;
      pin.emplace(src, bytes);
    }
    if (!pin || pin->pinned()) {
      MOEFLOW_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
      MOEFLOW_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    if (!warned_pin_) {
      std::fprintf(stderr,
                   "moeflow: note: cannot pin the model's memory for copies to the GPU (%s); "
                   "copying through a pinned staging buffer instead\n",
                   pin->reason().c_str());
      warned_pin_ = true;
    }
  }
  // Two pinned buffers in turn: the CPU fills one while the other is on its way.
  for (Buffer& b : bounce_)
    if (!b) b = PinnedHostAllocator::instance().allocate(kBounceBytes);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (size_t off = 0, i = 0; off < bytes; off += kBounceBytes, ++i) {
    const size_t n = std::min(kBounceBytes, bytes - off);
    MOEFLOW_CUDA_CHECK(cudaEventSynchronize(bounce_done_[i % 2]));
    std::memcpy(bounce_[i % 2].data(), s + off, n);
    MOEFLOW_CUDA_CHECK(
        cudaMemcpyAsync(d + off, bounce_[i % 2].data(), n, cudaMemcpyHostToDevice, stream_));
    MOEFLOW_CUDA_CHECK(cudaEventRecord(bounce_done_[i % 2], stream_));
  }
  MOEFLOW_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

TensorView CudaBackend::adopt_weight(const TensorView& w) {
  if (!w || w.space == MemSpace::Device) return w;
  const uint64_t bytes = w.nbytes();
  auto it = adopted_.find(w.data);
  if (it == adopted_.end() || it->second.bytes < bytes) {
    Adopted a{alloc_.allocate(bytes), bytes};
    upload(a.buf.data(), w.data, bytes);
    if (it != adopted_.end()) retired_.push_back(std::move(it->second.buf));
    it = adopted_.insert_or_assign(w.data, std::move(a)).first;
  }
  TensorView v = w;
  v.data = it->second.buf.data();
  v.space = MemSpace::Device;
  return v;
}

void CudaBackend::copy(TensorView dst, const TensorView& src) {
  if (dst.type != src.type || dst.ne[0] != src.ne[0] || dst.ne[1] != src.ne[1])
    fail("cuda backend: copy between views of different shapes or types ({} {}x{} <- {} {}x{})",
         type_name(dst.type), dst.ne[1], dst.ne[0], type_name(src.type), src.ne[1], src.ne[0]);
  const size_t rb = row_bytes(src.type, src.ne[0]);
  const int64_t rows = src.ne[1];
  if (rows == 0 || rb == 0) return;
  if (is_host(dst.space) && is_host(src.space)) {
    sync_point();  // the device may still be writing pinned memory
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst.row(r), src.row(r), rb);
    return;
  }
  auto enqueue = [&] {
    MOEFLOW_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, dst.row_stride(), src.data, src.row_stride(), rb,
                                         (size_t)rows, cudaMemcpyDefault, stream_));
  };
  if (!is_host(dst.space) && !is_host(src.space)) {
    op(true, mix_key(1, rb * 131 + (uint64_t)rows), enqueue);
    return;
  }
  if (is_host(src.space)) {  // to the device: the caller may reuse its memory on return
    if (src.space == MemSpace::Host && dst.rows_contiguous() && src.rows_contiguous() &&
        rb * rows >= (1u << 20)) {
      upload(dst.data, src.data, rb * (size_t)rows);
      return;
    }
    graphs_.end();
    enqueue();
    MOEFLOW_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  sync_point();  // to the host: the contents must be there on return
  enqueue();
  MOEFLOW_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

const float* CudaBackend::read_f32(const TensorView& v, std::vector<float>& staging) {
  check_f32_rows(v, "read_f32", "tensor");
  if (!v.rows_contiguous()) fail("cuda backend: read_f32 needs rows back to back");
  if (is_host(v.space)) {
    sync_point();
    return v.as<const float>();
  }
  const size_t bytes = (size_t)v.rows() * v.cols() * sizeof(float);
  if (readback_.size() < bytes) {
    graphs_.end();
    readback_ = PinnedHostAllocator::instance().allocate(bytes);
  }
  // The copy to pinned memory closes the step's last graph (the logits of a decode step).
  op(true, mix_key(16, bytes), [&] {
    MOEFLOW_CUDA_CHECK(
        cudaMemcpyAsync(readback_.data(), v.data, bytes, cudaMemcpyDeviceToHost, stream_));
  });
  sync_point();
  staging.resize((size_t)v.rows() * v.cols());
  std::memcpy(staging.data(), readback_.data(), bytes);
  return staging.data();
}

}  // namespace cuda
}  // namespace moeflow
