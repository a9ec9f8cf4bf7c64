#pragma once
// The intrinsics header of the files compiled for one instruction set (*_avx2.cpp, *_avx512.cpp),
// included before anything else that uses them. GCC 12's avx512fintrin.h and avxintrin.h trip
// -Wmaybe-uninitialized / -Wuninitialized on their own "undefined" pass-through operands
// (_mm*_undefined_*, the upper halves of casts, cvtph_ps, extract); nothing in those files reads
// uninitialised data. A diagnostic pragma holds to the end of the including file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>
