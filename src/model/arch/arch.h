#pragma once
// One file per architecture (model/arch/<name>.cpp): its GGUF name, the hyper-parameters only it
// has, and a builder that loads each layer's tensors with the shared helpers of model/weights.h
// and says what the layer computes (LayerSpec). The forward pass is the same for all of them.
// See docs/adding-a-model.md.
//
// Registration: each file defines `const ArchDef& arch_<file name>()`; the build generates the
// list of them from the files present (arch_list.inc), so adding a file is all it takes.
#include <string>
#include <vector>

#include "model/hparams.h"
#include "model/layer_spec.h"

namespace moeflow {

class GgufFile;
class ModelLoader;
struct ModelWeights;

struct ArchDef {
  const char* name;    // general.architecture, as llama.cpp writes it
  const char* models;  // the model families it covers (for `moeflow info` and the docs)
  bool dense_allowed;  // expert_count may be 0 (a dense model)
  bool
      norm_topk_default;  // renormalise the top-k weights unless expert_weights_norm says otherwise
  // Reads and checks the architecture's own metadata after the common keys (may be null).
  void (*load_hparams)(const GgufFile& f, HParams& hp);
  // Loads every layer's tensors into w.layers and fills one LayerSpec per layer.
  void (*build)(ModelLoader& ld, const HParams& hp, ModelWeights& w, std::vector<LayerSpec>& specs);
};

// Throws moeflow::Error naming the architecture (and listing the known ones) if unsupported.
const ArchDef& find_arch(const std::string& name);
std::string known_arch_names();
const std::vector<const ArchDef*>& all_archs();

}  // namespace moeflow
