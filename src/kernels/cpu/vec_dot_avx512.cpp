// AVX-512 (F/BW/VL + VNNI) kernels: vpdpbusd replaces the maddubs + madd pair of AVX2 and never
// saturates.
#include "kernels/cpu/nt_dispatch.h"

namespace moeflow::kernels {

void fill_avx512_table(DotTable&) {}

}  // namespace moeflow::kernels
