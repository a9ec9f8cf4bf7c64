#include "backend/device_rules.h"

#include "core/error.h"

namespace moeflow {

void check_alignment(const char* who, size_t alignment, size_t max_alignment) {
  if (alignment == 0 || alignment > max_alignment || (alignment & (alignment - 1)) != 0)
    fail("{}: alignment {} is not a power of two up to {}", who, alignment, max_alignment);
}

}  // namespace moeflow
