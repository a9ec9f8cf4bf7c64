#pragma once
// GGUF metadata of a synthetic model, keyed exactly as llama.cpp's converter writes it.
#include "gguf/gguf_writer.h"
#include "model/gen/model_generator.h"

namespace moeflow::gen {

void write_metadata(GgufWriter& w, const GenOptions& opt);

// llama.cpp's general.file_type (LLAMA_FTYPE_*) for a model whose bulk is of type t; -1 when
// it has none.
int llama_file_type(GgmlType t);

}  // namespace moeflow::gen
