#include "backend/cuda/cuda_graph.h"

#include "backend/cuda/cuda_check.h"

namespace moeflow::cuda {
namespace {

// Executable graphs kept per backend; a step has about two segments per layer, all of one or
// two shapes, so this only bounds pathological inputs.
constexpr size_t kMaxExecs = 1024;

}  // namespace

GraphSegments::~GraphSegments() {
  abort();
  for (auto& [k, e] : execs_) (void)cudaGraphExecDestroy(e);
}

void GraphSegments::before_op(bool capturable, uint64_t key) {
  if (capturing_ && !capturable) end();
  if (!enabled_ || !capturable) return;
  if (!capturing_) {
    MOEFLOW_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    key_ = 0x6d6f65666c6f77ull;
  }
  key_ = mix_key(key_, key);
  ++stats_.ops;
}

void GraphSegments::end() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t g = nullptr;
  MOEFLOW_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
  struct GraphGuard {
    cudaGraph_t g;
    ~GraphGuard() { (void)cudaGraphDestroy(g); }
  } guard{g};
  auto it = execs_.find(key_);
  if (it != execs_.end()) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(it->second, g, &info) == cudaSuccess) {
      ++stats_.updates;
    } else {
      (void)cudaGetLastError();  // a different topology under the same key: build it anew
      (void)cudaGraphExecDestroy(it->second);
      execs_.erase(it);
      it = execs_.end();
    }
  }
  if (it == execs_.end()) {
    if (execs_.size() >= kMaxExecs) {
      for (auto& [k, e] : execs_) (void)cudaGraphExecDestroy(e);
      execs_.clear();
    }
    cudaGraphExec_t exec = nullptr;
    MOEFLOW_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    it = execs_.emplace(key_, exec).first;
    ++stats_.instantiations;
  }
  MOEFLOW_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  ++stats_.launches;
}

void GraphSegments::abort() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t g = nullptr;
  if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) (void)cudaGraphDestroy(g);
  (void)cudaGetLastError();
}

}  // namespace moeflow::cuda
